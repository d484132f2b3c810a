#!/usr/bin/env bash
# session 45, call 3 (not run: no device time was left). 1. stream_for's host time a wrapper
# call (codegen-triton 0.9.26) against its earlier form, in one process; then the one-kernel
# call's host time at batch 1 (BERT's intermediate with the template: 32.4 us on an H100 in
# session 44, eager 26.1). 2. Why ConvNeXt-tiny's compile grew with channels-last (bench
# compile 3.4 -> 7.5 s on an H100; the A/B's first compile 17.7 s against 2.8): each order,
# with each compile's phases. 3. gpu_dwconv_probe.py: a tiled depthwise 7x7 (Triton, channels-
# last) against cuDNN's on ConvNeXt-tiny's four shapes, bf16 and fp32 (cuDNN's bf16 7x7s: 1.25
# ms of the model's 4.18 ms of kernel time on an H100, about 7.6x their bandwidth floor)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
PEAK=3350; [[ $card == *H200* ]] && PEAK=4300
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_dwconv_probe.py --hang-s 145 --peak-gbs $PEAK --json $OUT/dwconv-probe.json 2>&1 | grep -v Warn | tee $OUT/dwconv-probe.log
TRITON_INTERPRET=0 timeout 90 python3 benchmarks/triton_launch_overhead.py --cuda 2>&1 | grep -v Warn | tee $OUT/launch-overhead.log
TRITON_INTERPRET=0 timeout 60 python3 benchmarks/gpu_template_check.py --hang-s 55 --profile --cases "bert intermediate (batch" 2>&1 | grep -v Warn | tee $OUT/host-b1.log | cut -c1-400
NEVER='{"loop_ir": {"channels_last": "never"}}'
AB="python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --steps 10 --suite timm --model convnext_tiny --rounds 4 --hang-s 115"
TRITON_INTERPRET=0 TORCHKILN_CACHE_DIR=/tmp/tkc1 TRITON_CACHE_DIR=/tmp/trc1 timeout 120 $AB --a '{}' --b "$NEVER" > $OUT/ab-cl-first.log 2>&1; grep -h "compiled in\|phases\|B / A" $OUT/ab-cl-first.log
TRITON_INTERPRET=0 TORCHKILN_CACHE_DIR=/tmp/tkc2 TRITON_CACHE_DIR=/tmp/trc2 timeout 120 $AB --a "$NEVER" --b '{}' > $OUT/ab-cl-second.log 2>&1; grep -h "compiled in\|phases\|B / A" $OUT/ab-cl-second.log
