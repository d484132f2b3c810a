#!/usr/bin/env bash
# session 8 call 1: where resnet50/mobilenetv3 training time goes (tk vs tc kernels), and mobilenet inference host time
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
timeout 330 python3 benchmarks/gpu_kernel_profile.py --suite timm --models resnet50,mobilenetv3_large_100 --tasks train --only torchkiln,inductor --hang-s 320 --out $OUT 2>&1 | tee $OUT/profile-train.log | grep -v "^  " | tail -60
timeout 150 python3 benchmarks/gpu_kernel_profile.py --suite timm --models mobilenetv3_large_100 --tasks infer --only torchkiln,inductor --host-profile --hang-s 140 --out $OUT/infer 2>&1 | tee $OUT/profile-infer.log | grep -v "^  " | tail -30
