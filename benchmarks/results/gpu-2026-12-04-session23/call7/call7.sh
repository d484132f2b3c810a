#!/bin/bash
# session 23, call 7: the committed code (6fe4973): every bandwidth case in bfloat16 (a check
# that nothing else moved) and the layer norm backward in float32, three compilers
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
{
timeout 150 python3 benchmarks/gpu_bandwidth.py --hang-s 140 --dtypes bfloat16 --json "$OUT/bandwidth-bf16.json" 2>&1 | grep -v "Warn\|warn\|USDT\|^$"
timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --dtypes float32 --cases "layer norm" --json "$OUT/bandwidth-fp32-ln.json" 2>&1 | grep -v "Warn\|warn\|USDT\|^$"
} 2>&1 | tee "$OUT/call7.log"
