#!/usr/bin/env bash
# session 34, call 2. On an H200: the headline tables (hf and timm at full size, bf16
# inference, default mode). On an H100: torchkiln's kernels in a training step against the
# card's limits (gpu_kernel_profile.py via gpu_session.sh kernel-limits): BERT and GPT-2 (hf,
# full size, bf16 autocast), then ResNet-50 (timm, batch 64): which generated kernels are
# furthest from the bandwidth, and what the scatters with atomics (BERT's token-type gradient)
# cost
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BENCH_LIMIT=290 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -30
else
  MODELS=bert TASKS=train TIMM_MODELS=resnet50 LIMITS_LIMIT=140 bash benchmarks/gpu_session.sh kernel-limits 2>&1 | tail -80
fi
