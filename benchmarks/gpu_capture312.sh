#!/usr/bin/env bash
# Capture on Python 3.12 (the GPU machine's interpreter): dynamo-capture's and guards' suites,
# the graph-break corpus included, and the meta-package's tests. Run through the device tool
# from the repo root with the bytecode wheel carried in .whl/. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
python3 -c 'import sys, torch; print(sys.version, torch.__version__)'
timeout 420 python3 -m pytest -q -n 12 --timeout 120 -p no:cacheprovider --import-mode=importlib \
  packages/dynamo-capture/tests packages/guards/tests packages/torchkiln/tests 2>&1 \
  | tee "$OUT/capture-py312.log" | grep -E "passed|failed|FAILED|Error" | tail -60
