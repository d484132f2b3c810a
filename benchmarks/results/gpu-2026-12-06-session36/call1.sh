#!/usr/bin/env bash
# session 36, call 1. On an H200: the bf16 inference tables (timm, then hf). On an H100:
# ResNet-50's and ConvNeXt-tiny's training steps, this tree (saved convolution operands
# channels-last; extern ATen calls through their Python bindings) against the session's base
# (.scratch/s36/base: the packages at 45159d9), each run with eager and torch.compile beside it
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BENCH_LIMIT=290 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -12
  BENCH_LIMIT=250 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -12
else
  MODELS=resnet50 BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -6
  (cd .scratch/s36/base && OUT=$OUT/base MODELS=resnet50 BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -6)
  MODELS=resnet50 BENCH_LIMIT=70 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -6
  (cd .scratch/s36/base && OUT=$OUT/base MODELS=resnet50 BENCH_LIMIT=70 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -6)
fi
