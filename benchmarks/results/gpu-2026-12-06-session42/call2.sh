#!/usr/bin/env bash
# session 42, call 2: the CUDA tests (masked attention, broadcast realize, cuBLAS epilogues,
# matmul templates), then Llama's bf16 inference A/B, templates on (default) against off
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 120 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_masked_attention_cuda.py packages/loop-ir/tests/test_broadcast_realize.py tests/test_cublas_epilogues_e2e.py tests/test_matmul_templates_e2e.py 2>&1 | tail -4 | tee $OUT/tests-cuda.log
TRITON_INTERPRET=0 timeout 200 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite hf --model llama --rounds 12 --steps 10 --hang-s 190 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-llama.log 2>&1; tail -4 $OUT/ab-llama.log
