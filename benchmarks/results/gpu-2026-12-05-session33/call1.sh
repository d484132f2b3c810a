#!/usr/bin/env bash
# session 33, call 1. On an H200: the bandwidth table (bf16), the kernel A/Bs owed there, the
# bf16 hf table. On an H100: the vocabulary heads' products in float32 (pad or not), then the
# Python 3.12 suites (the four exclusions of session 32 checked)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | grep -v "^\s*$" | tail -40
  AB_LIMIT=36 AB_CASES='bn stats nhwc|{}|bfloat16,float32;bn stats nhwc|{"transposed_welford_xblock": 0}|bfloat16,float32;gelu|{}|bfloat16,float32;gelu|{"erf_two_ranges": true}|bfloat16,float32' \
    timeout 160 bash benchmarks/gpu_session.sh kernel-ab 2>&1 | grep -v "^\s*$" | tee "$OUT/kernel-ab-summary.log"
  BENCH_LIMIT=${L:-200} bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -30
else
  for a in "--dtype float32" "--dtype float32 --tf32" "--dtype bfloat16"; do
    timeout 60 python3 benchmarks/gpu_mm_layouts.py $a 2>&1 | tee -a "$OUT/mm-layouts.log"
  done
  PY312_LIMIT=${PY312_LIMIT:-400} bash benchmarks/gpu_session.sh py312 2>&1 | tail -30
fi
