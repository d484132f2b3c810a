#!/usr/bin/env bash
# session 36, call 3: the max-pool forward's window checks and index in int32 (loop-ir 0.8.23,
# uncommitted): ResNet-50's training step, then torchkiln's kernels against the limits for
# ResNet-50 (the fused batch-norm + ReLU + max-pool kernel: 0.223 ms at 692 GB/s in session 34)
# and ConvNeXt-tiny (the training row within 1% of torch.compile's, call 2); then ConvNeXt's
# host time
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
MODELS=resnet50 BENCH_LIMIT=110 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -3
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache
TRITON_INTERPRET=0 timeout 230 python3 benchmarks/gpu_kernel_profile.py --hang-s 225 --suite timm \
  --models resnet50,convnext_tiny --tasks train --only torchkiln --no-tar --out "$OUT/limits" 2>&1 \
  | tee "$OUT/limits.log" | grep -v "^   [a-z]" | tail -90
HOST_SUITE=timm HOST_MODELS=convnext_tiny HOST_LIMIT=100 HOST_LINES=100 bash benchmarks/gpu_session.sh train-host 2>&1 | tail -110
