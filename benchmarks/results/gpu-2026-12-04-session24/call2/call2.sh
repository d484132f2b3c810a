#!/bin/bash
# session 24, call 2: the softmax over rows of 50257 by hand (gpu_walked_tail_probe.py: a narrow
# last block loaded first, a reciprocal, RBLOCK 8192 / 16384, register caps), bf16 and fp32;
# batch-norm statistics over channels-last images: each kernel's time (--profile) and a narrow
# sweep of the partials kernel with register caps 32 / 40 (more programs a SM)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
F="grep -v Warn\|warn\|USDT\|^$"
{
echo "=== probe bf16"; timeout 100 python3 benchmarks/gpu_walked_tail_probe.py --hang-s 95 --json "$OUT/probe-bf16.json" 2>&1 | $F
echo "=== probe fp32"; timeout 100 python3 benchmarks/gpu_walked_tail_probe.py --hang-s 95 --dtype float32 --json "$OUT/probe-fp32.json" 2>&1 | $F
echo "=== bn profile"; timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --dtypes bfloat16 --cases "bn stats" --profile 2>&1 | $F | tail -30
echo "=== bn sweep"; timeout 200 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 195 --cases "bn stats nhwc" --narrow --maxnreg 32,40 --json "$OUT/sweep-bn.json" 2>&1 | $F
} 2>&1 | tee "$OUT/call2.log"
