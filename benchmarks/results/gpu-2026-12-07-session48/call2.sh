#!/usr/bin/env bash
# session 48, call 2. codegen-triton 0.9.29: the strip kernel relaunches its kept binary
# directly (Triton's C launcher), not through fn[grid]. 1. codegen-triton's depthwise and
# fast-launch tests on CUDA, and the depthwise e2e CUDA tests on Python 3.12; 2. host time a
# call (direct, fn[grid], cuDNN) on ConvNeXt-tiny's 7x7 shapes; 3. ConvNeXt-tiny's training
# step, "always" (strip kernel) against the default (cuDNN's in training); 4. its bench rows
# against torch.compile (inference bf16, training). On an H200: 1's smoke run, then the
# full-size bf16 inference tables instead
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
timeout 100 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_depthwise.py \
  packages/codegen-triton/tests/test_fast_launch.py 2>&1 | tee $OUT/smoke-depthwise.log | grep -v PASS | tail -6
if [[ $card == *H200* ]]; then
  BENCH_LIMIT=230 bash benchmarks/gpu_session.sh timm-full hf-full
  exit
fi
TRITON_INTERPRET=0 timeout 100 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib --timeout 95 \
  tests/test_depthwise_convolution_e2e.py -k cuda 2>&1 | tail -3 | tee $OUT/cuda-tests.log
TRITON_INTERPRET=0 timeout 60 python3 benchmarks/gpu_depthwise_host.py --hang-s 55 2>&1 | tee $OUT/depthwise-host.log
ALWAYS='{"loop_ir": {"depthwise_convolutions": "always"}}'
TRITON_INTERPRET=0 timeout 130 python3 benchmarks/gpu_options_ab.py --steps 10 --suite timm --model convnext_tiny --rounds 6 --hang-s 125 --a "$ALWAYS" --b '{}' > $OUT/ab-depthwise-train.log 2>&1; grep -h "compiled in\|B / A\|Error" $OUT/ab-depthwise-train.log
MODELS=convnext_tiny BENCH_LIMIT=100 bash benchmarks/gpu_session.sh timm-full timm-train
