#!/usr/bin/env bash
# session 42, call 4: the full-size hf table in bf16 at this code (matmul templates in the default mode)
source benchmarks/gpu_env.sh
OUT=$OUT/hf BENCH_LIMIT=420 timeout 430 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep -v Warning | tail -9
