#!/usr/bin/env bash
# session 48, call 6. On an H200: the full-size bf16 inference tables (hf-full, then timm-full
# as time allows). On an H100: the hf-full table alone (a check of the whole suite at this
# session's code)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=${LIMIT:-260} bash benchmarks/gpu_session.sh hf-full timm-full
  exit
fi
BENCH_LIMIT=260 bash benchmarks/gpu_session.sh hf-full
