#!/usr/bin/env bash
# session 41, call 1: cuBLASLt epilogues (loop-ir cublas_epilogues.py): the product-level check,
# then GPT-2's and T5's full-size bf16 inference, A: default ("measure"), B: "never"
source benchmarks/gpu_env.sh
cat "$OUT/commit.txt"
timeout -s ABRT 90 python3 benchmarks/gpu_epilogue_check.py --hang-s 85 2>&1 | grep -v Warning | tee $OUT/epilogue-check.log
timeout -s ABRT 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_cublas_epilogues_e2e.py -k cuda -s 2>&1 | tail -5 | tee $OUT/cuda-test.log
for m in gpt2 t5_encoder; do
  timeout -s ABRT 150 python3 benchmarks/gpu_options_ab.py --infer --suite hf --model $m --rounds 16 --steps 10 --hang-s 145 \
    --a '{}' --b '{"loop_ir": {"cublas_epilogues": "never"}}' 2>&1 | grep -v Warning | tee -a $OUT/ab-infer.log | tail -4
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT/hf-full BENCH_LIMIT=200 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -25
fi
