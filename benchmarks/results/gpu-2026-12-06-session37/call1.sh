#!/usr/bin/env bash
# session 37, call 1: combo kernels (independent small pointwise kernels launched as one) on the
# GPU. Their CUDA test with real kernels; then ConvNeXt-tiny's and ResNet-50's bf16 training
# steps with combo kernels (the default on CUDA) beside eager and torch.compile, and the same
# without them (--options combo_kernels never, --no-peer), on this one machine
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
CUDA_TESTS_LIMIT=100 bash benchmarks/gpu_session.sh cuda-tests 2>&1 | tail -8
for m in convnext_tiny resnet50; do
  MODELS=$m BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -5
  OUT=$OUT/never MODELS=$m BENCH_LIMIT=90 bash benchmarks/gpu_session.sh timm-train-never 2>&1 | tail -5
done
