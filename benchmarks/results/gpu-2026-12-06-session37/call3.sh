#!/usr/bin/env bash
# session 37, call 3: the A/B of combo kernels on ConvNeXt-tiny's and ResNet-50's bf16 training
# steps, each model in a folder of its own (call 1's second model overwrote the first's files):
# without combos (--no-peer), with them (the default, eager and torch.compile beside), without
# again; the host's load before each run, as call 1's machine was noisy
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
for m in convnext_tiny resnet50; do
  uptime; OUT=$OUT/$m/never1 MODELS=$m BENCH_LIMIT=90 bash benchmarks/gpu_session.sh timm-train-never 2>&1 | grep "timm/" | head -3
  uptime; OUT=$OUT/$m MODELS=$m BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-train 2>&1 | grep "timm/\|behind\|ahead" | head -4
  uptime; OUT=$OUT/$m/never2 MODELS=$m BENCH_LIMIT=90 bash benchmarks/gpu_session.sh timm-train-never 2>&1 | grep "timm/" | head -3
done
