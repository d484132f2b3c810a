#!/usr/bin/env bash
# session 9 call 1: where gpt2/llama training time goes (tk vs tc), bert split A/B, resnet50 memcpys
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 260 python3 benchmarks/gpu_kernel_profile.py --suite hf --models gpt2,llama --tasks train --only torchkiln,inductor --host-profile --hang-s 250 --out $OUT/hf 2>&1 | tee $OUT/profile-hf-train.log | grep -v "^  " | tail -50
timeout 100 python3 benchmarks/gpu_kernel_profile.py --suite hf --models bert --tasks train --only torchkiln --hang-s 95 --out $OUT/bert-split 2>&1 | tee $OUT/bert-split.log | grep -E "^=====|wall|split:"
timeout 100 python3 benchmarks/gpu_kernel_profile.py --suite hf --models bert --tasks train --only torchkiln --options '{"loop_ir": {"split_programs": 0}}' --hang-s 95 --out $OUT/bert-nosplit 2>&1 | tee $OUT/bert-nosplit.log | grep -E "^=====|wall|split:"
timeout 80 python3 benchmarks/gpu_mutation_copies.py resnet50 64 2>&1 | tail -12 | tee $OUT/mutation-copies.log
