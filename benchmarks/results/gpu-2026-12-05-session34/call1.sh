#!/usr/bin/env bash
# session 34, call 1 (session 33 call 2, unchanged). On an H200: the bandwidth table (bf16), the kernel A/Bs owed there, the
# bf16 hf table. On an H100: loop-ir 0.8.20's float32 products unpadded without TF32 (bert,
# distilbert, gpt2 in float32: time and peak memory against eager and torch.compile), then Llama
# (rotary halves indexed linearly) and T5 (its position bias computed once, not per batch row in
# the softmax) in bf16, inference and a training step
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | grep -v "^\s*$" | tail -40
  AB_LIMIT=36 AB_CASES='bn stats nhwc|{}|bfloat16,float32;bn stats nhwc|{"transposed_welford_xblock": 0}|bfloat16,float32;gelu|{}|bfloat16,float32;gelu|{"erf_two_ranges": true}|bfloat16,float32' \
    timeout 160 bash benchmarks/gpu_session.sh kernel-ab 2>&1 | grep -v "^\s*$" | tee "$OUT/kernel-ab-summary.log"
  BENCH_LIMIT=${L:-200} bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -30
else
  MODELS=bert,distilbert,gpt2 BENCH_LIMIT=180 bash benchmarks/gpu_session.sh hf-full-fp32 2>&1 | tail -14
  MODELS=t5_encoder,llama BENCH_LIMIT=120 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -10
  MODELS=t5_encoder,llama BENCH_LIMIT=200 bash benchmarks/gpu_session.sh hf-train 2>&1 | tail -10
fi
