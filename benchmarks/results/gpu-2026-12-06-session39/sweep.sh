#!/usr/bin/env bash
# session 39: the layer norm backward's mixed-order kernel over ConvNeXt-tiny's first-stage rows
# (64 x 56 x 56 = 200704 rows of 96, bf16): rows an iteration (TritonOptions.mixed_rows) and
# the row loop's pipelining (mixed_stages), torchkiln alone; torch.compile once
export OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
B() { timeout -s ABRT 60 python3 benchmarks/gpu_bandwidth.py --cases "layer norm backward" --rows 200704 --width ${W:-96} --dtypes bfloat16 --hang-s 55 "$@" 2>&1 | grep -i "layer norm backward" | tail -1; }
echo "=== eager, default, inductor"; B
for o in '{"mixed_rows": 4}' '{"mixed_rows": 8}' '{"mixed_rows": 16}' '{"mixed_rows": 32}' '{"mixed_rows": 8, "mixed_stages": 3}' '{"mixed_rows": 16, "mixed_stages": 3}' '{"mixed_rows": 8, "mixed_values_per_thread": 8}'; do
  echo "=== $o"; B --compilers torchkiln --triton-options "$o"
done
