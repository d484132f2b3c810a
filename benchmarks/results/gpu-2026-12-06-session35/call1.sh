#!/usr/bin/env bash
# session 35, call 1: the generated max-pool backward on the GPU (kernel against ATen's, the op
# table's pooling rows on CUDA); then on an H100 ResNet-50's training step (eager / tk / tc),
# on an H200 the timm table (bf16 inference, full size)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
bash benchmarks/gpu_session.sh pool-bwd 2>&1 | tail -45
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BENCH_LIMIT=300 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -22
else
  MODELS=resnet50 BENCH_LIMIT=260 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -20
fi
