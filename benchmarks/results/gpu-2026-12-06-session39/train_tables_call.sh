#!/usr/bin/env bash
# session 39, call 3: the full-size training tables with this session's defaults (eager and
# torch.compile beside): ConvNeXt-tiny, BERT, GPT-2
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"; uptime
MODELS=convnext_tiny BENCH_LIMIT=200 bash benchmarks/gpu_session.sh timm-train 2>&1 | grep -v Warning | tail -8
MODELS=bert,gpt2 BENCH_LIMIT=330 bash benchmarks/gpu_session.sh hf-train 2>&1 | grep -v Warning | tail -10
