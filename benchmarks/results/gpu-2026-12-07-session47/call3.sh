#!/usr/bin/env bash
# session 47, call 3: ConvNeXt-tiny's training row against torch.compile (bf16 autocast, batch
# 64) with loop-ir 0.8.33's default: the backward's convolutions channels-last (the restride's
# gradient no longer keeps them NCHW), the depthwise ones cuDNN's
source benchmarks/gpu_env.sh
MODELS=convnext_tiny BENCH_LIMIT=190 bash benchmarks/gpu_session.sh timm-train
