#!/usr/bin/env bash
# session 44, call 2. On an H200: the full-size float32 tables. On an H100: the full-size bf16
# tables with the landed default (templates predicted), against session 42's
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=272 bash benchmarks/gpu_session.sh timm-full-fp32 hf-full-fp32
else
  BENCH_LIMIT=272 bash benchmarks/gpu_session.sh hf-full timm-full
fi
