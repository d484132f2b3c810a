#!/usr/bin/env bash
# session 44, call 1. On an H200: the full-size bf16 tables (timm-full, hf-full). On an H100:
# the landed default (templates predicted) on whole models against templates off (ConvNeXt-tiny,
# Llama); ConvNeXt-tiny's depthwise 7x7 in float32, cuDNN against the direct convolution, alone
# and in the model (taps 49 against the default 25); the host time and kernels of the product
# checks slower than eager; the template CUDA tests
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=272 bash benchmarks/gpu_session.sh timm-full hf-full
  exit
fi
AB="python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --steps 10"
NEVER='{"loop_ir": {"matmul_templates": "never"}}'
TRITON_INTERPRET=0 timeout 70 python3 benchmarks/gpu_template_check.py --hang-s 65 --profile --cases "convnext-tiny stage 4,bert intermediate (batch" 2>&1 | grep -v Warning | tee $OUT/template-profile.log | sed -e 's/ err [^|]*\[[^]]*\]//g'
TRITON_INTERPRET=0 timeout 85 $AB --suite timm --model convnext_tiny --rounds 6 --hang-s 80 --b "$NEVER" > $OUT/ab-convnext.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext.log; grep -h "A linear" $OUT/ab-convnext.log | cut -c1-220 | head -8
TRITON_INTERPRET=0 timeout 85 $AB --suite hf --model llama --rounds 6 --hang-s 80 --b "$NEVER" > $OUT/ab-llama.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-llama.log; grep -h "A linear" $OUT/ab-llama.log | cut -c1-220 | head -4
TRITON_INTERPRET=0 timeout 70 python3 benchmarks/gpu_direct_conv.py --hang-s 65 --models convnext_tiny --dtypes float32 --json $OUT/direct-conv-fp32.json 2>&1 | grep -v Warning | tee $OUT/direct-conv-fp32.log | tail -8
TRITON_INTERPRET=0 timeout 95 python3 benchmarks/gpu_options_ab.py --infer --dtype float32 --steps 10 --suite timm --model convnext_tiny --rounds 6 --hang-s 90 --a '{"loop_ir": {"direct_convolution_taps": 49}}' --b '{}' > $OUT/ab-convnext-fp32-taps.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext-fp32-taps.log
TRITON_INTERPRET=0 timeout 100 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 4 --timeout 90 tests/test_matmul_templates_e2e.py packages/codegen-triton/tests/test_template_choice.py tests/test_masked_attention_cuda.py packages/loop-ir/tests/test_broadcast_realize.py 2>&1 | tee $OUT/cuda-tests.log | tail -8
