#!/usr/bin/env bash
# session 47, call 2: ConvNeXt-tiny's bench rows against torch.compile with the strip kernel
# (inference bf16 and fp32; training, bf16 autocast, its forward and input gradients too)
source benchmarks/gpu_env.sh
MODELS=convnext_tiny BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-full timm-full-fp32 timm-train
# where ConvNeXt-tiny's training step spends its kernel time now (eager, torchkiln, torch.compile)
TRITON_INTERPRET=0 timeout 200 python3 benchmarks/gpu_kernel_profile.py --suite timm --models convnext_tiny --tasks train --hang-s 190 --no-tar --out $OUT/profile 2>&1 | tail -60
