#!/usr/bin/env bash
# session 38, call 6: torchkiln::mm_padded_n split at the aligned columns (the vocabulary head
# written into a padded output, no padded copy of its weight). The head's products alone
# (gpu_mm_layouts.py, bf16); the hf suite's three vocabulary models in bf16 inference with
# LoopIROptions.pad_matmul_outputs_only and with the default (eager and torch.compile beside
# in both); then GPT-2's and BERT's training step, A: default, B: outputs only, in one process
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
timeout -s ABRT 60 python3 benchmarks/gpu_mm_layouts.py --dtype bfloat16 2>&1 | tee $OUT/mm-layouts.log
OUT=$OUT/padout MODELS=bert,distilbert,gpt2 BENCH_LIMIT=150 bash benchmarks/gpu_session.sh hf-full-padout 2>&1 | grep "hf/\|ahead\|behind\|peak" | head -12
OUT=$OUT/default MODELS=bert,distilbert,gpt2 BENCH_LIMIT=150 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep "hf/\|ahead\|behind\|peak" | head -12
for m in gpt2 bert; do
  timeout -s ABRT 100 python3 benchmarks/gpu_options_ab.py --suite hf --model $m --rounds 8 --steps 5 --hang-s 95 \
    --b '{"loop_ir": {"pad_matmul_outputs_only": true}}' 2>&1 | grep -v Warning | tee -a $OUT/ab.log | tail -3
done
