#!/usr/bin/env bash
# session 48, call 1 (session 47's unrun call). On an H200: the full-size bf16 inference tables (timm-full, hf-full). On
# an H100: ConvNeXt-tiny's bench rows against torch.compile with the strip kernel (inference
# bf16 and fp32; training, bf16 autocast, its forward and input gradients too), then where its
# training step spends its kernel time (eager, torchkiln, torch.compile)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=272 bash benchmarks/gpu_session.sh timm-full hf-full
  exit
fi
MODELS=convnext_tiny BENCH_LIMIT=130 bash benchmarks/gpu_session.sh timm-full timm-full-fp32 timm-train
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_kernel_profile.py --suite timm --models convnext_tiny --tasks train --hang-s 145 --no-tar --out $OUT/profile 2>&1 | tail -60
