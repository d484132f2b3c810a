#!/usr/bin/env bash
# session 42, call 8: matmul templates after the compile-time change (every pair's candidates
# compiled together, three tiles) and T5's position bias stored in its permute's order: the
# CUDA tests; T5 in the bf16 table (5.23 ms in call 4); ConvNeXt-tiny's compile time (19.7 s in
# call 5)
source benchmarks/gpu_env.sh
cat "$OUT/commit.txt"
TRITON_INTERPRET=0 timeout 45 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_matmul_templates_e2e.py tests/test_masked_attention_cuda.py packages/loop-ir/tests/test_broadcast_realize.py 2>&1 | tail -2 | tee $OUT/tests-cuda.log
OUT=$OUT/hf MODELS=t5_encoder BENCH_LIMIT=55 timeout 60 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep -v Warning | tail -2
OUT=$OUT/timm MODELS=convnext_tiny BENCH_LIMIT=70 timeout 75 bash benchmarks/gpu_session.sh timm-full 2>&1 | grep -v Warning | tail -2
