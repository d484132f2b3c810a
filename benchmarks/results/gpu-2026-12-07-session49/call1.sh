#!/usr/bin/env bash
# session 49, call 1: session 48's call 6 (H200: the full-size bf16 hf and timm tables; H100:
# the hf-full table)
exec bash benchmarks/results/gpu-2026-12-07-session48/call6.sh
