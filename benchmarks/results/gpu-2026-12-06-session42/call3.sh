#!/usr/bin/env bash
# session 42, call 3: batch 1, where the template won 2x on BERT's intermediate product: BERT's
# bf16 inference A/B at batch 1, then the batch-1 CUDA-graph table for BERT, DistilBERT, Llama
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite hf --model bert --batch 1 --rounds 16 --steps 20 --hang-s 140 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-bert-b1.log 2>&1; tail -2 $OUT/ab-bert-b1.log
OUT=$OUT/b1 MODELS=bert,distilbert,llama BENCH_LIMIT=300 timeout 310 bash benchmarks/gpu_session.sh hf-b1-cudagraphs 2>&1 | grep -v Warning | tail -8
