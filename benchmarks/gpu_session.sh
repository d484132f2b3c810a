#!/usr/bin/env bash
# One GPU-machine session (Python 3.12, torch 2.11, triton 3.6, no registry): the test suite on
# 3.12, then the benchmarks on CUDA. Run through the device tool from the repo root with the
# bytecode wheel carried in .whl/ (see benchmarks/README.md). Everything lands in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC"
export TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
python3 -c 'import sys, torch, triton; print(sys.version); print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'

part=${1:-all}
if [[ $part == all || $part == tests ]]; then
  # The whole suite on 3.12. codegen-triton's own tests run below on the GPU for real (the smoke
  # script): triton 3.6's interpreter cannot run looped reductions with this machine's numpy 2.5
  # (its `range` over a kernel argument calls int() on a 1-element array), a bug of that
  # interpreter which CI (triton 3.9) does not have.
  timeout 300 python3 -m pytest -q -n 8 --timeout 120 -p no:cacheprovider --import-mode=importlib \
    --ignore=packages/codegen-triton/tests packages/*/tests tests 2>&1 | tee "$OUT/tests-py312.log" | tail -40
  # Real Triton kernels on the GPU.
  timeout 120 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib tests -k "cuda or gpu" 2>&1 | tail -15
  [[ -f benchmarks/gpu_triton_smoke.py ]] && timeout 120 python3 benchmarks/gpu_triton_smoke.py 2>&1 | tail -30
fi
if [[ $part == all || $part == bench ]]; then
  timeout 240 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite zoo --no-progress \
    --json "$OUT/gpu-zoo-bf16.json" 2>&1 | tee "$OUT/gpu-zoo.log" | tail -30
  timeout 200 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite hf --no-progress \
    --json "$OUT/gpu-hf-bf16.json" 2>&1 | tee "$OUT/gpu-hf.log" | tail -30
fi
