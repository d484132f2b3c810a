#!/usr/bin/env bash
# session 50, call 3: whichever card comes. An H200: the full-size bf16 tables (call 1); an
# H100: the training steps under reduce-overhead (call 2)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [[ $card == *H200* ]]; then
  exec bash benchmarks/results/gpu-2026-12-07-session50/call1.sh
fi
exec bash benchmarks/results/gpu-2026-12-07-session50/call2.sh
