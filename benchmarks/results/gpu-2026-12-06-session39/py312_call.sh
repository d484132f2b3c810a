#!/usr/bin/env bash
# session 39, call 1: the test suites on Python 3.12 / torch 2.11 (session 38's oracle fix, the
# seed exclusion, the hoisted check, the simplify fixpoint and flip, never run there)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
PY312_LIMIT=340 bash benchmarks/gpu_session.sh py312 > "$OUT/py312.log" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/py312.log" | tail -30
