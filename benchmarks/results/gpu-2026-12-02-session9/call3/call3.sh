#!/usr/bin/env bash
# session 9 call 3: full-size timm training suite, same code as call 2
set -uo pipefail
BENCH_LIMIT=${BENCH_LIMIT:-470} OUT=$OUT bash benchmarks/gpu_session.sh timm-train
