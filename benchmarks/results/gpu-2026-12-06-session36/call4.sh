#!/usr/bin/env bash
# session 36, call 4: ConvNeXt-tiny's bf16 training step (batch 64) with a convolution
# backward's bias gradient as a generated sum (loop-ir's conv_bias_grads.py, uncommitted then)
# against LoopIROptions.generated_conv_bias_grads false (ATen's reduction: 0.93 ms a step in
# call 3's kernel profile), one machine
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
MODELS=convnext_tiny BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -3
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache
timeout 110 python3 -m torchkiln bench --device cuda --dtype bfloat16 --no-progress --suite timm --size full \
  --train --repeat 5 --warmup 2 --models convnext_tiny --no-peer \
  --options '{"loop_ir": {"generated_conv_bias_grads": false}}' --json "$OUT/gpu-timm-full-train-bf16-aten-bias.json" 2>&1 | tail -3
