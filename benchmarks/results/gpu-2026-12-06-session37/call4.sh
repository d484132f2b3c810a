#!/usr/bin/env bash
# session 37, call 4: BERT-base's and GPT-2's bf16 training steps with combo kernels (eager and
# torch.compile beside), then without them (--no-peer); the results packed in one tar (the
# device tool brings back 8 files a call)
export OUT=${OUT:-/tmp/out}
R=$OUT/r; mkdir -p $R
git log --oneline -1 > "$R/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$R/commit.txt"
cat "$R/commit.txt"
uptime; OUT=$R/on MODELS=bert,gpt2 BENCH_LIMIT=330 bash benchmarks/gpu_session.sh hf-train 2>&1 | grep "hf/\|ahead\|behind" | head -6
uptime; OUT=$R/never MODELS=bert,gpt2 BENCH_LIMIT=200 bash benchmarks/gpu_session.sh hf-train-never 2>&1 | grep "hf/" | head -4
tar czf $OUT/call4.tgz -C $R .
