#!/usr/bin/env bash
# session 42, call 9: ConvNeXt-tiny's A/B at the second form (compile times of both in one
# process: 26.3 / 1.7 s in call 7), then the product check
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 90 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite timm --model convnext_tiny --rounds 8 --steps 10 --hang-s 85 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-convnext.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext.log
TRITON_INTERPRET=0 timeout 70 python3 benchmarks/gpu_template_check.py --hang-s 65 2>&1 | grep -v Warning | tee $OUT/template-check.log | cut -c1-330
