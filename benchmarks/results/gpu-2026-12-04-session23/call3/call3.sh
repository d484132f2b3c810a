#!/bin/bash
# session 23, call 3: mixed order on (new warps rule) and off per width; hf training at full size
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
B() { timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 --cases "layer norm backward" "$@" 2>&1 | grep "^layer"; }
{
for w in "--width 4096" "--rows 131072 --width 768" "--rows 65536 --width 1024"; do
  echo "=== $w on, three compilers"; B $w
  echo "=== $w off"; B $w --compilers torchkiln --loop-ir '{"mixed_order_reductions": false}'
done
} 2>&1 | tee "$OUT/call3.log"
MODELS=bert,distilbert,gpt2 bash benchmarks/gpu_session.sh hf-train 2>&1 | tail -20 | tee -a "$OUT/call3.log"
