#!/usr/bin/env bash
# session 50, call 1: session 49's call 3 (H200: the full-size bf16 tables; H100: the
# full-size float32 tables at this code)
exec bash benchmarks/results/gpu-2026-12-07-session49/call3.sh
