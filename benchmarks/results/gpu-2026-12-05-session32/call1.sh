#!/usr/bin/env bash
# session 32, call 1: the H200 kernel decisions (Welford blocks on vs off, erf_two_ranges) then
# the Python 3.12 suites
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv >> "$OUT/commit.txt"
AB_LIMIT=36 AB_CASES='bn stats nhwc|{}|bfloat16,float32;bn stats nhwc|{"transposed_welford_xblock": 128}|bfloat16,float32;gelu|{}|bfloat16,float32;gelu|{"erf_two_ranges": true}|bfloat16,float32' \
  timeout 160 bash benchmarks/gpu_session.sh kernel-ab 2>&1 | grep -v "^\s*$" | tee "$OUT/kernel-ab-summary.log"
PY312_LIMIT=${PY312_LIMIT:-380} bash benchmarks/gpu_session.sh py312 2>&1 | tail -30
