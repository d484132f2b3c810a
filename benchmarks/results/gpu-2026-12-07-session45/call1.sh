#!/usr/bin/env bash
# session 45, call 1. On an H200: the full-size bf16 tables (timm-full, hf-full). On an H100:
# session 44's restride fix on the GPU (ConvNeXt-tiny bf16 inference, the default against
# channels_last "never"), ConvNeXt-tiny's full-size inference and training rows, and where a
# small call's host time goes (BERT's intermediate at batch 1: cProfile of the compiled call)
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=272 bash benchmarks/gpu_session.sh timm-full hf-full
  exit
fi
TRITON_INTERPRET=0 timeout 110 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --steps 10 --suite timm --model convnext_tiny --rounds 6 --hang-s 105 --b '{"loop_ir": {"channels_last": "never"}}' > $OUT/ab-convnext-cl.log 2>&1; grep -h "compiled in\|B / A\|median" $OUT/ab-convnext-cl.log | cut -c1-200
TRITON_INTERPRET=0 timeout 60 python3 benchmarks/gpu_template_check.py --hang-s 55 --profile --cprofile --cases "bert intermediate (batch" 2>&1 | grep -v Warning > $OUT/host-cprofile.log; grep -v "^ *[0-9]" $OUT/host-cprofile.log | cut -c1-300 | head -20
MODELS=convnext_tiny BENCH_LIMIT=120 bash benchmarks/gpu_session.sh timm-full
MODELS=convnext_tiny BENCH_LIMIT=200 bash benchmarks/gpu_session.sh timm-train
