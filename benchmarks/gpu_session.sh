#!/usr/bin/env bash
# One GPU-machine session (Python 3.12, torch 2.11, triton 3.6, no registry): the op-level suite and
# codegen-triton's tests with real kernels, then the benchmarks on CUDA. Run through the device
# tool from the repo root with the bytecode wheel carried in .whl/ (see benchmarks/README.md).
# Everything lands in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC"
export TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
python3 -c 'import sys, torch, triton; print(sys.version); print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'

# In priority order, each bounded, so one device call (10 minutes at most) gets the most out.
# 1. The op-level suite (every lowering, every dtype, odd sizes, strided/broadcast inputs) through
#    codegen-triton with real kernels on CUDA (the CPU runs it through Triton's interpreter).
TRITON_INTERPRET=0 PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" timeout 200 python3 -m pytest -q -n 12 \
  --timeout 180 -p no:cacheprovider --import-mode=importlib -p cuda_default_plugin \
  tests/test_ops_codegen.py -k triton 2>&1 | tee "$OUT/ops-triton-cuda.log" | tail -15
# 2. codegen-triton's own tests and loop-ir's end-to-end tests on CUDA, launch overhead.
timeout 90 python3 benchmarks/gpu_triton_smoke.py 2>&1 | tee "$OUT/triton-smoke.log" | tail -2
# 3. The benchmarks (kernel and ATen-fallback counts per model are in the JSON rows).
timeout 140 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite zoo --no-progress \
  --json "$OUT/gpu-zoo-bf16.json" 2>&1 | tee "$OUT/gpu-zoo.log" | tail -16
timeout 120 python3 -m torchkiln bench --device cuda --dtype bfloat16 --suite hf --no-progress \
  --json "$OUT/gpu-hf-bf16.json" 2>&1 | tee "$OUT/gpu-hf.log" | tail -16
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("gpu-*-bf16.json")):
    for r in json.loads(f.read_text())["rows"]:
        print(f"{r['suite']}/{r['model']}: graphs {r['graphs']} kernels {r['kernels']} "
              f"aten fallbacks {r.get('op_fallbacks')} accuracy {r['accuracy']}")
PY
# The Python 3.12 test suites run in their own call: benchmarks/gpu_capture312.sh.
