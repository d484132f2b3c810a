#!/usr/bin/env bash
# session 41, call 5: on an H200 the tables (bf16 timm-full and hf-full, then float32
# as time allows); on an H100 timm-full (bf16) at this code, to complete call 2's table
source benchmarks/gpu_env.sh
cat "$OUT/commit.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT/timm BENCH_LIMIT=250 timeout 270 bash benchmarks/gpu_session.sh timm-full 2>&1 | grep -v Warning | tail -6
  OUT=$OUT/hf BENCH_LIMIT=250 timeout 270 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep -v Warning | tail -6
else
  OUT=$OUT/timm BENCH_LIMIT=300 timeout 320 bash benchmarks/gpu_session.sh timm-full 2>&1 | grep -v Warning | tail -6
fi
