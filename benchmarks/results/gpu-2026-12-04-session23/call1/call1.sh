#!/bin/bash
# session 23, call 1: layer norm backward, mixed-order kernel vs two kernels, variants
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
B() { timeout 170 python3 benchmarks/gpu_bandwidth.py --hang-s 160 --cases "layer norm backward" "$@" 2>&1 | grep -v "Warn\|warn\|USDT\|^$"; }
{
echo "=== default (mixed order), three compilers"; B --json "$OUT/lnb-default.json"
echo "=== mixed order off"; B --compilers torchkiln --loop-ir '{"mixed_order_reductions": false}'
echo "=== 8 values a thread (16 warps at 4096)"; B --compilers torchkiln --triton-options '{"mixed_values_per_thread": 8}'
echo "=== 264 programs"; B --compilers torchkiln --split-programs 264
echo "=== 1056 programs"; B --compilers torchkiln --split-programs 1056
echo "=== profile default"; B --compilers torchkiln,inductor --profile --dtypes bfloat16
echo "=== width 768 rows 131072 (BERT-like)"; B --rows 131072 --width 768 --dtypes bfloat16,float32
} 2>&1 | tee "$OUT/call1.log"
