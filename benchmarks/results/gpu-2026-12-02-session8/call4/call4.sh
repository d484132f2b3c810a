#!/usr/bin/env bash
# session 8 call 4: hf training at full size on tmp-gpu3 (channels-last training, split reductions, sibling fusion, saved weight casts, scatter-as-select)
ROOT=$PWD
cd .scratch/gpu3
cp -r $ROOT/.whl .whl
BENCH_LIMIT=${BENCH_LIMIT:-500} OUT=$OUT bash benchmarks/gpu_session.sh hf-train
