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

# In priority order, each bounded, so one device call (10 minutes at most) gets the most out.
timeout 200 python3 -m pytest -q -n 8 --timeout 120 -p no:cacheprovider --import-mode=importlib \
  $(ls -d packages/*/tests | grep -v codegen-triton) tests 2>&1 | tee "$OUT/tests-py312.log" | tail -4
# codegen-triton's own tests run here on the GPU for real (the smoke script): triton 3.6's
# interpreter cannot run looped reductions with this machine's numpy 2.5 (its `range` over a
# kernel argument calls int() on a 1-element array), a bug CI's triton 3.9 does not have.
timeout 90 python3 benchmarks/gpu_triton_smoke.py 2>&1 | tee "$OUT/triton-smoke.log" | tail -2
timeout 150 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite zoo --no-progress \
  --json "$OUT/gpu-zoo-bf16.json" 2>&1 | tee "$OUT/gpu-zoo.log" | tail -16
timeout 120 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite hf --no-progress \
  --json "$OUT/gpu-hf-bf16.json" 2>&1 | tee "$OUT/gpu-hf.log" | tail -16
timeout 100 python3 benchmarks/gpu_timm_capture.py 2>&1 | tee "$OUT/timm-capture.log" | tail -6
timeout 120 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite timm --no-progress \
  --json "$OUT/gpu-timm-bf16.json" 2>&1 | tee "$OUT/gpu-timm.log" | tail -16
