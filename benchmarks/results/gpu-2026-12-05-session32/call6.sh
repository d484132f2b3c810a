#!/usr/bin/env bash
# session 32, call 6: codegen-triton 0.9.18's Welford outer blocks (XBLOCK 128, RBLOCK 64, 64 values
# a thread, 4 warps) on the channels-last batch-norm statistics: against eager and torch.compile,
# then alternated with the common blocks (transposed_welford_xblock 0), torchkiln alone
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv >> "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
timeout 50 python3 benchmarks/gpu_bandwidth.py --hang-s 47 --dtypes bfloat16,float32 --cases "bn stats nhwc" \
  --json "$OUT/bn-nhwc-all.json" 2>&1 | grep -v "Warn\|warn\|each cell" | tee "$OUT/bn-nhwc-all.log"
for opts in '{"transposed_welford_xblock": 0}'; do
  echo "== TritonOptions $opts"
  timeout 30 python3 benchmarks/gpu_bandwidth.py --hang-s 27 --dtypes bfloat16,float32 --cases "bn stats nhwc" \
    --compilers torchkiln --triton-options "$opts" 2>&1 | grep -v "Warn\|warn\|each cell\|^case" | tee -a "$OUT/bn-nhwc-ab.log"
done
