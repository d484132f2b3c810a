#!/usr/bin/env bash
# session 51, call 5 (the last 280 s of device time): ConvNeXt-tiny's bf16 training step on one
# host, torchkiln alone (--no-peer), in the default mode and under reduce-overhead (the step
# graphs, on since 0.9.34): how much of the step the CUDA graphs remove, which call 1 could not
# say (no same-host default-mode figure).
# Prediction: default 18-24 ms, reduce-overhead about call 1's 19 ms or below, at eager ~30-40 ms.
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for mode in default reduce-overhead; do
  timeout -s ABRT -k 5 75 python3 -m torchkiln bench --device cuda --dtype bfloat16 \
    --no-progress --models convnext_tiny --suite timm --size full --train --mode $mode \
    --repeat 3 --warmup 2 --no-peer --json "$OUT/gpu-timm-train-convnext-$mode.json" 2>&1 \
    | tee "$OUT/gpu-timm-train-convnext-$mode.log" | grep -i "convnext\|geomean" | head -4
done
