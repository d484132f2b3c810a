#!/usr/bin/env bash
# session 42, call 5: the full-size timm table in bf16 at this code (matmul templates in the default mode)
source benchmarks/gpu_env.sh
OUT=$OUT/timm BENCH_LIMIT=420 timeout 430 bash benchmarks/gpu_session.sh timm-full 2>&1 | grep -v Warning | tail -9
