#!/usr/bin/env bash
# session 48, call 1: session 47's unrun call as it was (its start failed here too)
exec bash benchmarks/results/gpu-2026-12-07-session47/next-call-a-not-run.sh
