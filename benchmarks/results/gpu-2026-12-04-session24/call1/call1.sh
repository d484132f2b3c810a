#!/bin/bash
# session 24, call 1 (61bc771): the batch-norm bandwidth cases (the untimed _split_mod index
# change of session 23), then the full-size training tables not rerun since session 9/13:
# timm (five models) and hf t5, llama, three compilers in one run each
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
{
timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --dtypes bfloat16,float32 --cases "bn " --json "$OUT/bandwidth-bn.json" 2>&1 | grep -v "Warn\|warn\|USDT\|^$"
} 2>&1 | tee "$OUT/call1.log"
BENCH_LIMIT=290 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -14 | tee -a "$OUT/call1.log"
MODELS=t5_encoder,llama BENCH_LIMIT=190 bash benchmarks/gpu_session.sh hf-train 2>&1 | tail -10 | tee -a "$OUT/call1.log"
