#!/usr/bin/env bash
# session 38, call 3: compile time on a cold cache (fresh TORCHKILN_CACHE_DIR and TRITON_CACHE_DIR)
# of ConvNeXt-tiny's and ResNet-50's bf16 training step, combo kernels on (16 members, flat ifs,
# 64 MB budget) against never (no peer: torchkiln alone); then the in-process A/B of the step
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
for m in convnext_tiny resnet50; do
  for opt in on never; do
    if [ $opt = on ]; then O='{}'; else O='{"loop_ir": {"combo_kernels": "never"}}'; fi
    rm -rf /tmp/cold-tk /tmp/cold-triton
    uptime
    TORCHKILN_CACHE_DIR=/tmp/cold-tk TRITON_CACHE_DIR=/tmp/cold-triton timeout -s ABRT 120 \
      python3 -m torchkiln bench --device cuda --dtype bfloat16 --no-progress --suite timm --size full \
      --train --repeat 2 --warmup 1 --no-peer --models $m --options "$O" \
      --json $OUT/cold-$m-$opt.json 2>&1 | grep "timm/" | head -2
  done
done
export TORCHKILN_CACHE_DIR=/tmp/tk-cache
for m in resnet50 convnext_tiny; do
  timeout -s ABRT 150 python3 benchmarks/gpu_options_ab.py --suite timm --model $m --batch 64 --rounds 10 --steps 10 --hang-s 145 2>&1 | grep -v Warning | tee -a $OUT/ab.log | tail -5
done
