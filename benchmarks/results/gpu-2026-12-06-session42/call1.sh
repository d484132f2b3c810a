#!/usr/bin/env bash
# session 42, call 1: session 41's item 2 (the masked-attention CUDA tests; T5's kernel profile:
# is the 0.287 ms position-bias kernel gone?) and the first matmul templates (loop-ir
# matmul_templates.py, codegen-triton _template.py): their check against float64 and timings,
# then BERT's bf16 inference A/B, templates on (default) against off
source benchmarks/gpu_env.sh
cat "$OUT/commit.txt"
TRITON_INTERPRET=0 timeout 90 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_masked_attention_cuda.py tests/test_broadcast_realize.py tests/test_cublas_epilogues_e2e.py 2>&1 | tail -3 | tee $OUT/tests-cuda.log
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_template_check.py --hang-s 140 2>&1 | grep -v Warning | tee $OUT/template-check.log
TRITON_INTERPRET=0 timeout 170 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite hf --model bert --rounds 12 --steps 10 --hang-s 160 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-bert.log 2>&1; tail -4 $OUT/ab-bert.log
TRITON_INTERPRET=0 timeout 110 python3 benchmarks/gpu_kernel_profile.py --suite hf --models t5_encoder --tasks infer --dtype bfloat16 --only torchkiln --no-tar --hang-s 100 --out $OUT > $OUT/profile.log 2>&1; echo profile rc=$?
grep -A12 -i "slowest\|kernel " $OUT/profile.log | head -30
