#!/bin/bash
# session 23, call 5: rows of 768 / 1024 as one row an iteration (mixed_tile 1024) pipelined or
# not; 4096 with the new default (3 stages at one row an iteration)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
B() { timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 --cases "layer norm backward" --compilers torchkiln "$@" 2>&1 | grep "^layer"; }
{
echo "=== --width 4096 default"; B --width 4096
for w in "--rows 131072 --width 768" "--rows 65536 --width 1024"; do
  for o in '{"mixed_tile": 1024}' '{"mixed_tile": 1024, "mixed_stages": 1}' '{"mixed_tile": 1024, "mixed_stages": 4}' '{"mixed_tile": 1024, "mixed_stages": 2}' '{"mixed_tile": 2048, "mixed_values_per_thread": 8, "mixed_stages": 1}'; do
    echo "=== $w $o"; B $w --triton-options "$o"
  done
done
} 2>&1 | tee "$OUT/call5.log"
