#!/bin/bash
# session 23, call 2: mixed-order kernel's warps and tile, widths 4096 and 768
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
B() { timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 --cases "layer norm backward" --compilers torchkiln "$@" 2>&1 | grep "^layer"; }
{
for w in "--width 4096" "--rows 131072 --width 768" "--rows 65536 --width 1024"; do
  for o in '{}' '{"mixed_values_per_thread": 8}' '{"mixed_values_per_thread": 4}' '{"mixed_tile": 8192}' '{"mixed_tile": 8192, "mixed_values_per_thread": 8}' '{"mixed_tile": 2048, "mixed_values_per_thread": 8}'; do
    echo "=== $w $o"; B $w --triton-options "$o"
  done
done
echo "=== inductor 1024"; timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 --cases "layer norm backward" --compilers eager,inductor --rows 65536 --width 1024 2>&1 | grep "^layer"
} 2>&1 | tee "$OUT/call2.log"
