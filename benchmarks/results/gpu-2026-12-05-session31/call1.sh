#!/usr/bin/env bash
# session 31, call 1: the kernel choices awaiting the H200 (kernel-ab), the recurrent tests on CUDA
# (dynamo-capture 0.9.9's break at the recurrent op), the bandwidth table on the current code,
# then the Python 3.12 suites for what time is left
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"
AB_LIMIT=36 timeout 258 bash benchmarks/gpu_session.sh kernel-ab 2>&1 | grep -v "^\s*$" | tee "$OUT/kernel-ab-summary.log"
( export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
  timeout 75 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 4 --timeout 60 \
    tests/test_recurrent_e2e.py -rfE 2>&1 | tee "$OUT/recurrent.log" | grep -E "passed|failed|FAILED|Error" | cut -c1-300 | tail -12 )
BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | tail -24
PY312_LIMIT=${PY312_LIMIT:-90} bash benchmarks/gpu_session.sh py312 2>&1 | tail -30
