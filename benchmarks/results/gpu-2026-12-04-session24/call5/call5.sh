#!/bin/bash
# session 24, call 5 (6ff4bb2, codegen-triton 0.9.12): the training table's fifth timm model
# (efficientnet_b0, cut by call 1's limit), and where GPT-2's training step (tied with
# torch.compile in session 23) spends its kernel time, torchkiln against torch.compile
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
MODELS=efficientnet_b0 BENCH_LIMIT=170 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -8 | tee "$OUT/call5.log"
timeout 130 python3 benchmarks/gpu_kernel_profile.py --hang-s 125 --suite hf --models gpt2 --tasks train --only torchkiln,inductor --out "$OUT/prof" 2>&1 | grep -v "Warn\|warn\|^$" | tail -40 | tee -a "$OUT/call5.log"
