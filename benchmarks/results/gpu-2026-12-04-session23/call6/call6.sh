#!/bin/bash
# session 23, call 6: the final defaults (one row an iteration, pipelined 4 stages for 2-byte
# rows, 3 for 4-byte) against eager and torch.compile at three widths; hf training, full size
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
B() { timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 --cases "layer norm backward" "$@" 2>&1 | grep "^layer"; }
{
echo "=== 4096"; B --width 4096 --json "$OUT/lnb-4096.json"
echo "=== 768"; B --rows 131072 --width 768 --json "$OUT/lnb-768.json"
echo "=== 1024"; B --rows 65536 --width 1024 --json "$OUT/lnb-1024.json"
echo "=== 4096 bf16, 3 stages"; B --width 4096 --dtypes bfloat16 --compilers torchkiln --triton-options '{"mixed_stages": 3}'
} 2>&1 | tee "$OUT/call6.log"
MODELS=bert,distilbert,gpt2 BENCH_LIMIT=300 bash benchmarks/gpu_session.sh hf-train 2>&1 | tail -12 | tee -a "$OUT/call6.log"
