#!/usr/bin/env bash
# session 42, call 6: the full-size hf training table in bf16 at this code (matmul templates in the default mode)
source benchmarks/gpu_env.sh
OUT=$OUT/train BENCH_LIMIT=400 timeout 410 bash benchmarks/gpu_session.sh hf-train 2>&1 | grep -v Warning | tail -9
