#!/usr/bin/env bash
# session 38, call 2: the full-size hf suite, inference in bf16 (combo kernels on)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"; uptime
BENCH_LIMIT=560 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep -v Warning | tail -20
