#!/usr/bin/env bash
# session 38, call 7: pad_matmul_outputs_only "auto" (the default now: bias-free products
# written into a padded output as two products). The head's products alone, both ways of
# computing the columns past the aligned ones (gpu_mm_layouts.py, bf16); the hf suite in bf16
# inference (eager and torch.compile beside); GPT-2's training step with the peer
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
timeout -s ABRT 60 python3 benchmarks/gpu_mm_layouts.py --dtype bfloat16 2>&1 | grep "===\|fwd" | tee $OUT/mm-layouts.log
OUT=$OUT/infer BENCH_LIMIT=200 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep "hf/\|ahead\|behind\|peak" | head -14
OUT=$OUT/train MODELS=gpt2 BENCH_LIMIT=150 bash benchmarks/gpu_session.sh hf-train 2>&1 | grep "hf/\|ahead\|behind\|peak" | head -6
