#!/usr/bin/env bash
# session 46, call 1. On an H200: the full-size bf16 tables (session 44's call1.sh). On an H100:
# session 45's call3-not-run.sh (the depthwise probe, stream_for on the GPU's host, ConvNeXt's
# compile time in both orders with phases)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ $card == *H200* ]]; then
  bash benchmarks/results/gpu-2026-12-07-session44/call1.sh
else
  bash benchmarks/results/gpu-2026-12-07-session45/call3-not-run.sh
fi
