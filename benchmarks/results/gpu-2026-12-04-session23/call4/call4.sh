#!/bin/bash
# session 23, call 4: the mixed-order row loop pipelined (num_stages) per width; codegen-triton's
# tests and the mixed-order end-to-end tests with real kernels on Python 3.12
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
B() { timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 --cases "layer norm backward" --compilers torchkiln "$@" 2>&1 | grep "^layer"; }
{
for w in "--width 4096" "--rows 131072 --width 768" "--rows 65536 --width 1024"; do
  for o in '{}' '{"mixed_stages": 2}' '{"mixed_stages": 3}'; do
    echo "=== $w $o"; B $w --triton-options "$o"
  done
done
echo "=== smoke: mixed order"
timeout 150 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_mixed_order.py 2>&1 | grep -v PASS | tail -5
} 2>&1 | tee "$OUT/call4.log"
echo "=== smoke: all" | tee -a "$OUT/call4.log"
SMOKE_LIMIT=260 bash benchmarks/gpu_session.sh smoke 2>&1 | tail -4 | tee -a "$OUT/call4.log"
