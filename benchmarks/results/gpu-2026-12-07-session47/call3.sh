#!/usr/bin/env bash
# session 47, call 3: should a training step's smaller depthwise convolutions (3x3, 5x5 of
# stride 1: MobileNetV3's and EfficientNet-B0's, cuDNN's now) run the strip kernel too? A: the
# default; B: direct_convolution_taps 0 (in a training graph: every depthwise convolution of
# stride 1 through the strip kernel, forward and input gradient). B / A below 1: B faster.
source benchmarks/gpu_env.sh
ALL='{"loop_ir": {"direct_convolution_taps": 0}}'
for m in efficientnet_b0 mobilenetv3_large_100; do
  TRITON_INTERPRET=0 timeout 170 python3 benchmarks/gpu_options_ab.py --steps 10 --suite timm --model $m --rounds 4 --hang-s 165 --a '{}' --b "$ALL" > $OUT/ab-train-$m.log 2>&1; grep -h "compiled in\|phases\|B / A\|Error" $OUT/ab-train-$m.log
done
