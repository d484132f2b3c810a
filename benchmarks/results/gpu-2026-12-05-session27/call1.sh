#!/usr/bin/env bash
# session 27, call 1: walked-whole, bn-stats, bn-probe, cuda-tests
export OUT=${OUT:-/tmp/out}
timeout 575 bash benchmarks/gpu_session.sh walked-whole bn-stats bn-probe cuda-tests 2>&1 | tee $OUT/call1.log | grep -v "^\s*$" | tail -200
