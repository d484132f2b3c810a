#!/usr/bin/env bash
# session 27, call 3: the CUDA LSTM's trace failure in full (one test), then py312 again with a
# longer limit and -rf (call 2's was cut at 98% with one failure unnamed)
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
timeout 60 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib --timeout 50 "tests/test_recurrent_e2e.py::test_inference_is_one_graph_and_matches[lstm-cuda]" --tb=long -x > "$OUT/lstm-one.log" 2>&1
grep -n "aten\.\|_VF\|cudnn\|rnn.py\|func\b" "$OUT/lstm-one.log" | grep -v "^\s*$" | head -30
timeout 340 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 14 --timeout 120 -rf \
  -k "not triton and not cuda and not split_statistics" \
  $(ls -d packages/*/tests | grep -v codegen-triton) tests > "$OUT/tests-py312.log" 2>&1
grep -E "^FAILED|passed|failed" "$OUT/tests-py312.log" | cut -c1-300 | tail -20
