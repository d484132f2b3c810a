#!/usr/bin/env bash
# session 49, call 3. On an H200: the full-size bf16 tables (session 48's call 6). On an H100:
# the full-size float32 tables at this session's code (the last were session 46's, before the
# strip kernel became ConvNeXt-tiny's default in inference)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
if [[ $card == *H200* ]]; then
  exec env LIMIT=260 bash benchmarks/results/gpu-2026-12-07-session48/call6.sh
fi
BENCH_LIMIT=${LIMIT:-260} bash benchmarks/gpu_session.sh timm-full-fp32 hf-full-fp32
