#!/usr/bin/env bash
# session 8 call 5 (final code on main): timm training of the batch-norm nets; softmax / cross-entropy over rows of 50257 with and without the aligned walk
set -uo pipefail
OUT=${OUT:-/tmp/out}
MODELS=resnet50,mobilenetv3_large_100,efficientnet_b0 BENCH_LIMIT=290 OUT=$OUT bash benchmarks/gpu_session.sh timm-train
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
timeout 75 python3 benchmarks/gpu_bandwidth.py --dtypes bfloat16 --cases 50257 --hang-s 70 --json $OUT/bw-aligned.json 2>&1 | tail -6
timeout 60 python3 benchmarks/gpu_bandwidth.py --dtypes bfloat16 --cases 50257 --no-aligned-rows --hang-s 55 --json $OUT/bw-plain.json 2>&1 | tail -6
