#!/usr/bin/env bash
# session 8 call 2: channels-last training (branch wt-cltrain): kernel split of resnet50/mobilenetv3 training, torchkiln only; CUDA channels-last tests
ROOT=$PWD
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $ROOT/.whl/*.whl || exit 1
cd .scratch/cltrain; SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
TRITON_INTERPRET=0 timeout 100 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 3 --timeout 90 tests/test_channels_last_e2e.py tests/test_conv_bn_relu_train.py 2>&1 | tail -4
timeout 200 python3 benchmarks/gpu_kernel_profile.py --suite timm --models resnet50,mobilenetv3_large_100 --tasks train --only torchkiln --hang-s 190 --out $OUT 2>&1 | tee $OUT/profile-train.log | grep -v "^  " | grep -v Warn | tail -30
grep -A30 "top kernels" $OUT/profile-train.log | head -70
