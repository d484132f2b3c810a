#!/usr/bin/env bash
# session 31, call 2: the full-size inference tables (bf16) on the current code
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"
BENCH_LIMIT=285 bash benchmarks/gpu_session.sh hf-full timm-full 2>&1 | tail -40
