#!/usr/bin/env bash
# session 47, call 1 (session 46's call 9, not run there). The shipped strip kernel
# (codegen-triton 0.9.27: kernel rows a loop, 16 strips a program in float32) on the GPU:
# 1. the CUDA tests of the depthwise and direct convolutions (call 7's 45 s cut them after
# one); 2. ConvNeXt-tiny's training step (bf16 autocast), the default (loop-ir 0.8.33: the 7x7s'
# forward and input gradients through the strip kernel) against "never" (cuDNN's); 3.
# ConvNeXt-tiny's inference, the default against "never", bf16 (fp32 left: no time), compile phases
# beside. (The per-kernel probe of the shipped kernel, against its unrolled form and cuDNN,
# is left for a later session: this one's device time went on failed starts)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
TRITON_INTERPRET=0 timeout 130 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib --timeout 120 tests/test_depthwise_convolution_e2e.py tests/test_direct_convolution_e2e.py -k cuda 2>&1 | tail -4 | tee $OUT/cuda-tests.log
NEVER='{"loop_ir": {"depthwise_convolutions": "never"}}'
TRITON_INTERPRET=0 timeout 110 python3 benchmarks/gpu_options_ab.py --steps 10 --suite timm --model convnext_tiny --rounds 4 --hang-s 105 --a '{}' --b "$NEVER" > $OUT/ab-depthwise-train.log 2>&1; grep -h "compiled in\|phases\|B / A\|Error" $OUT/ab-depthwise-train.log
for dt in bfloat16; do
  TRITON_INTERPRET=0 timeout 100 python3 benchmarks/gpu_options_ab.py --infer --dtype $dt --steps 10 --suite timm --model convnext_tiny --rounds 4 --hang-s 95 --a '{}' --b "$NEVER" > $OUT/ab-depthwise-$dt.log 2>&1; grep -h "compiled in\|phases\|B / A" $OUT/ab-depthwise-$dt.log
done
