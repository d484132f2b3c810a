#!/bin/bash
# session 24, call 3: the softmax's output loop multiplying by the reciprocal of its sum
# (working tree on 61bc771): the softmax-type cases in bf16 and fp32, three compilers; the
# online-softmax tests with real kernels (Python 3.12); torch.compile's kernels for the
# batch-norm statistics over channels-last images (TORCH_LOGS=output_code), to read its tiling
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
F="grep -v Warn\|warn\|USDT\|^$"
{
echo "=== softmax cases"; timeout 150 python3 benchmarks/gpu_bandwidth.py --hang-s 145 --dtypes bfloat16,float32 --cases "rows of 50257,cross-entropy,log_softmax,softmax (last" --json "$OUT/bandwidth-softmax.json" 2>&1 | $F
echo "=== online tests"; timeout 150 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_online_softmax.py packages/codegen-triton/tests/test_wide_rows.py 2>&1 | grep -v PASS | tail -15
echo "=== inductor bn"; TORCH_LOGS=output_code timeout 90 python3 benchmarks/gpu_bandwidth.py --hang-s 85 --dtypes bfloat16 --cases "bn stats nhwc" --compilers inductor > "$OUT/inductor-bn.txt" 2>&1; grep -c "" "$OUT/inductor-bn.txt"
} 2>&1 | tee "$OUT/call3.log"
