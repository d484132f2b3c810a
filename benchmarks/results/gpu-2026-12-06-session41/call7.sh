#!/usr/bin/env bash
# session 41, call 7: a value read expanded by an extern kernel is stored at its own size
# (loop-ir graph.py): the masked-attention CUDA tests, then the full-size hf suite in bf16 for
# BERT (padding-mask bias) and T5 (position bias), whose bias reaches the memory-efficient
# attention expanded
source benchmarks/gpu_env.sh
cat "$OUT/commit.txt"
TRITON_INTERPRET=0 timeout 60 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_masked_attention_cuda.py 2>&1 | tail -2 | tee $OUT/tests-cuda.log
OUT=$OUT/hf MODELS=bert,t5_encoder BENCH_LIMIT=95 timeout 100 bash benchmarks/gpu_session.sh hf-full 2>&1 | grep -v Warning | tail -5
