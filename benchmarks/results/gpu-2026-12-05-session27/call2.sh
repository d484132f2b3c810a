#!/usr/bin/env bash
# session 27, call 2: py312; the recurrent tests on CUDA (cuDNN through copies of the weights);
# the outer-reduction tile variants over the transposed bandwidth cases
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
TRITON_INTERPRET=0 timeout 100 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 4 --timeout 90 tests/test_recurrent_e2e.py -rfE 2>&1 | tee "$OUT/recurrent.log" | grep -E "passed|failed|FAILED|Error" | cut -c1-400 | tail -25
for opts in '{}' '{"transposed_min_programs": 16}' \
  '{"transposed_min_programs": 16, "transposed_xblock": 128, "transposed_tile": 8192, "transposed_values_per_thread": 32}' \
  '{"transposed_min_programs": 16, "transposed_rblock": 16, "transposed_values_per_thread": 4}'; do
  echo "== TritonOptions $opts"
  timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --dtypes bfloat16 \
    --cases "column sum,bn stats nhwc,bn bwd sums nhwc,layer norm backward" --compilers torchkiln \
    --triton-options "$opts" 2>&1 | grep -v "Warn\|warn\|each cell" | tail -6
done
PY312_LIMIT=250 bash benchmarks/gpu_session.sh py312 2>&1 | tail -30
