#!/usr/bin/env bash
# session 37, call 6: in-process A/B of combo kernels (A: the default, combos on; B: never) on
# ResNet-50's and ConvNeXt-tiny's bf16 training steps at batch 64 and 8 (benchmarks/gpu_options_ab.py)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONFAULTHANDLER=1
for m in resnet50 convnext_tiny; do
  for b in 64 8; do
    uptime
    timeout -s ABRT 200 python3 benchmarks/gpu_options_ab.py --suite timm --model $m --batch $b --rounds 10 --steps 10 --hang-s 190 2>&1 | grep -v Warning | tee -a $OUT/ab.log | tail -5
  done
done
