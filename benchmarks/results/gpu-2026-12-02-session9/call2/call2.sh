#!/usr/bin/env bash
# session 9 call 2: full-size hf training suite, code with the recompute policy and the share-nothing fusion bound
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
BENCH_LIMIT=${BENCH_LIMIT:-520} OUT=$OUT bash benchmarks/gpu_session.sh hf-train
