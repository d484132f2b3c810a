#!/usr/bin/env bash
# session 31, call 3: the full-size training tables (bf16 autocast) on the current code
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"
BENCH_LIMIT=${L:-250} bash benchmarks/gpu_session.sh hf-train timm-train 2>&1 | tail -40
