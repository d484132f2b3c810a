#!/usr/bin/env bash
# session 32, call 2: the full-size inference tables in float32 on the current code
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv >> "$OUT/commit.txt"
BENCH_LIMIT=${L:-280} bash benchmarks/gpu_session.sh hf-full-fp32 timm-full-fp32 2>&1 | tail -40
