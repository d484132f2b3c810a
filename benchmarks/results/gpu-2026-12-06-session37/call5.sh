#!/usr/bin/env bash
# session 37, call 5: where launches cost: ResNet-50's and ConvNeXt-tiny's bf16 training steps
# at batch 8 (host-bound), with combo kernels (eager and torch.compile beside) and without
export OUT=${OUT:-/tmp/out}
R=$OUT/r; mkdir -p $R
git log --oneline -1 > "$R/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$R/commit.txt"
export PYTHONFAULTHANDLER=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) TORCHKILN_CACHE_DIR=/tmp/tk-cache
B="python3 -m torchkiln bench --device cuda --dtype bfloat16 --no-progress --suite timm --size full --train --batch 8 --repeat 8 --warmup 3 --models resnet50,convnext_tiny"
uptime; timeout -s ABRT -k 10 240 $B --json $R/on.json > $R/on.log 2>&1; grep "timm/\|ahead\|behind" $R/on.log | head -6
uptime; timeout -s ABRT -k 10 150 $B --no-peer --options '{"loop_ir": {"combo_kernels": "never"}}' --json $R/never.json > $R/never.log 2>&1; grep "timm/" $R/never.log | head -4
tar czf $OUT/call5.tgz -C $R .
