#!/usr/bin/env bash
# session 47, call 2 (chained on the warm H100 after call 1): where ConvNeXt-tiny's bf16 training
# step spends its time, kernels and host, with the strip kernel in training (then the default,
# call2/strip-kernel) and with cuDNN's depthwise convolutions (call2/cudnn)
source benchmarks/gpu_env.sh
for o in '{}' '{"loop_ir": {"depthwise_convolutions": "never"}}'; do TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_kernel_profile.py --suite timm --models convnext_tiny --tasks train --only torchkiln --options "$o" --hang-s 145 --no-tar --out $OUT/p$RANDOM 2>&1 | grep -v Warn | tail -45; done
