#!/usr/bin/env bash
# session 32, call 3: the two timm training rows session 31 did not reach, then batch 1 with CUDA graphs
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv >> "$OUT/commit.txt"
MODELS=convnext_tiny,efficientnet_b0 BENCH_LIMIT=250 bash benchmarks/gpu_session.sh timm-train 2>&1 | tail -20
BENCH_LIMIT=${L:-150} bash benchmarks/gpu_session.sh hf-b1-cudagraphs timm-b1-cudagraphs 2>&1 | tail -30
