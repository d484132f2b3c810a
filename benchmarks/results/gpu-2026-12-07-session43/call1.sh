#!/usr/bin/env bash
# session 43, call 1: Triton matmul forms (plain / TMA / TMA persistent) with a GELU epilogue
# against cuBLAS + GELU (standalone kernels); the template's forms through torchkiln (forced at
# the default tile: plain, descriptors, persistent, both; and never); the products in the
# default (predicted), autotune (timed) and never modes with ConvNeXt-tiny's fc1s; ConvNeXt-tiny
# default (predicted) against never
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_matmul_variants.py --hang-s 145 2>&1 | grep -v Warning | tee $OUT/variants.log
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_template_check.py --hang-s 145 --forms plain,descriptors,persistent,both --cases "bert intermediate (16,llama,convnext-tiny stage 1,convnext-tiny stage 3,vit" 2>&1 | grep -v Warning | tee $OUT/template-forms.log | cut -c1-700
TRITON_INTERPRET=0 timeout 130 python3 benchmarks/gpu_template_check.py --hang-s 125 2>&1 | grep -v Warning | tee $OUT/template-check.log | cut -c1-700
TRITON_INTERPRET=0 timeout 100 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite timm --model convnext_tiny --rounds 5 --steps 10 --hang-s 95 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-convnext.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext.log
