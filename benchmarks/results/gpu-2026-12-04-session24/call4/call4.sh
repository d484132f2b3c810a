#!/bin/bash
# session 24, call 4: batch-norm statistics over channels-last images (torchkiln 44% of the
# H200's bandwidth in bf16 where torch.compile's three kernels read at 62%, its first kernel
# splitting the rows 512 ways, ours 128): torchkiln alone, each kernel's time (--profile),
# the split's target programs (LoopIROptions.split_programs: 528 by default -> 128 chunks)
# against the outer reduction's values a thread (TritonOptions.transposed_values_per_thread)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
F() { grep -v "Warn\|warn\|USDT\|^$\|^each cell\|^case "; }
{
for sp in 528 2112 4224 8448; do
  for tv in 8 4 2; do
    echo "=== split_programs $sp, transposed_values_per_thread $tv"
    timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --dtypes bfloat16,float32 --cases "bn stats nhwc" \
      --compilers torchkiln --profile --loop-ir "{\"split_programs\": $sp}" \
      --triton-options "{\"transposed_values_per_thread\": $tv}" 2>&1 | F
  done
done
} 2>&1 | tee "$OUT/call4.log"
