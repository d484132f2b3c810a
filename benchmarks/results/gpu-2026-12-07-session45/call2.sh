#!/usr/bin/env bash
# session 45, call 2. On an H200: the full-size float32 tables. On an H100: the training table of
# the timm models (ConvNeXt-tiny's training step now channels-last; the others since session 39),
# then ConvNeXt-tiny's inference kernels against the hardware's limits (gpu_kernel_profile.py)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=272 bash benchmarks/gpu_session.sh timm-full-fp32 hf-full-fp32
  exit
fi
MODELS=resnet50,mobilenetv3_large_100,vit_base_patch16_224,efficientnet_b0 BENCH_LIMIT=330 bash benchmarks/gpu_session.sh timm-train
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_kernel_profile.py --hang-s 145 --suite timm --models convnext_tiny --tasks infer --only torchkiln --no-tar --out "$OUT/limits" 2>&1 | tee "$OUT/limits.log" | awk '/^=====/ {print} /against the H200/ {n = 17} n && n--'
