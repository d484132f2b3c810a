#!/usr/bin/env bash
# session 42, call 7: ConvNeXt-tiny's bf16 inference A/B (its pointwise convolutions are
# Linear + GELU over 200704 rows), templates on (default) against off; the linear log
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 230 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite timm --model convnext_tiny --rounds 12 --steps 10 --hang-s 220 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-convnext.log 2>&1; tail -3 $OUT/ab-convnext.log
