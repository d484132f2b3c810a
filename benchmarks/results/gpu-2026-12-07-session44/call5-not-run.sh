#!/usr/bin/env bash
# session 44, call 5: ConvNeXt-tiny bf16 inference, the default (loop-ir 0.8.31: the restride
# dropped, so the channels-last pass runs) against channels_last "never" (what ran before)
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
TRITON_INTERPRET=0 timeout 110 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --steps 10 --suite timm --model convnext_tiny --rounds 6 --hang-s 105 --b '{"loop_ir": {"channels_last": "never"}}' > $OUT/ab-convnext-cl.log 2>&1; grep -h "compiled in\|median" $OUT/ab-convnext-cl.log | cut -c1-200
