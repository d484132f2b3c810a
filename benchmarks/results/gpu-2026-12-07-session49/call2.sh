#!/usr/bin/env bash
# session 49, call 2. On an H200: session 48's call 6 (the full-size bf16 tables) with a shorter
# limit, then the float32 product forms. On an H100: the float32 product forms of every
# full-size linear layer (gpu_fp32_gemm_forms.py), then where BERT's float32 kernel time goes
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
if [[ $card == *H200* ]]; then
  LIMIT=200 bash benchmarks/results/gpu-2026-12-07-session48/call6.sh
fi
timeout -s ABRT 200 python3 benchmarks/gpu_fp32_gemm_forms.py 2>&1 | tee "$OUT/fp32-gemm-forms.txt"
if [[ $card != *H200* ]]; then
  timeout -s ABRT 200 python3 benchmarks/gpu_kernel_profile.py --suite hf --models bert \
    --tasks infer --dtype float32 --only torchkiln,inductor --no-tar 2>&1 | tail -60
fi
