#!/usr/bin/env bash
# session 38, call 8: the test suites on Python 3.12 (capture's dtype probe now also runs for
# calls mixing two floating dtypes; the fuzz oracle follows each value's precision)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
PY312_LIMIT=${PY312_LIMIT:-330} bash benchmarks/gpu_session.sh py312 2>&1 | tail -25
