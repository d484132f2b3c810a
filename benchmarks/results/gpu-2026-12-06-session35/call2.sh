#!/usr/bin/env bash
# session 35, call 2: the max-pool backward gather with int32 window checks (against call 1's
# int64); where ResNet-50's training step spends its host time (session 34: host 16.3 ms,
# kernels 12.9, wall 16.7: host bound)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
BANDWIDTH_LIMIT=100 bash benchmarks/gpu_session.sh pool-bwd 2>&1 | grep -v "^\.\.\." | tail -20
HOST_SUITE=timm HOST_MODELS=resnet50 HOST_LIMIT=130 HOST_LINES=140 bash benchmarks/gpu_session.sh train-host 2>&1 | tail -150
