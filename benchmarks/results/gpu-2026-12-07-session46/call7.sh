#!/usr/bin/env bash
# session 46, call 7: codegen-triton's strip kernel for depthwise convolutions
# (torchkiln::conv_depthwise, LoopIROptions.depthwise_convolutions "auto"). 1. the CUDA tests
# of the depthwise and direct convolutions on Python 3.12; 2. the strip kernel against cuDNN on
# ConvNeXt-tiny's four 7x7 shapes at batch 64, bf16 and fp32, its configurations and the one it
# picks; 3. ConvNeXt-tiny's inference, the default (strip kernel) against "never" (cuDNN),
# bf16 then fp32, with each compile's phases
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
PEAK=3350; [[ $card == *H200* ]] && PEAK=4300
TRITON_INTERPRET=0 timeout 45 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib --timeout 40 tests/test_depthwise_convolution_e2e.py tests/test_direct_convolution_e2e.py -k cuda 2>&1 | tail -4 | tee $OUT/cuda-tests.log
TRITON_INTERPRET=0 timeout 130 python3 benchmarks/gpu_dwconv_probe.py --hang-s 125 --variants strip,shipped --peak-gbs $PEAK --json $OUT/dwconv-probe.json 2>&1 | grep -v Warn | tee $OUT/dwconv-probe.log
NEVER='{"loop_ir": {"depthwise_convolutions": "never"}}'
for dt in bfloat16 float32; do
  TRITON_INTERPRET=0 timeout 90 python3 benchmarks/gpu_options_ab.py --infer --dtype $dt --steps 10 --suite timm --model convnext_tiny --rounds 4 --hang-s 85 --a '{}' --b "$NEVER" > $OUT/ab-depthwise-$dt.log 2>&1; grep -h "compiled in\|phases\|B / A" $OUT/ab-depthwise-$dt.log
done
