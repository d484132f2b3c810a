#!/usr/bin/env bash
# session 50, call 2: training steps under mode="reduce-overhead" (torchkiln 0.9.33's step
# graphs: a training forward and backward recorded as CUDA graphs apart; inference graphs that
# write buffers too). The tests on CUDA (Python 3.12), then the full-size training benches with
# reduce-overhead, both compilers (the bench checks a replayed step's gradients too).
# Prediction (session 48: ConvNeXt-tiny's bf16 step at batch 64 is host-bound, 20 ms of host
# against 13-15 ms of kernels): under reduce-overhead its step near its kernel time, 14-16 ms
# (the default mode's 18-21 ms); ResNet-50 (16.5 ms in session 46, less host-bound) a few
# percent; BERT and GPT-2 (about 27 and 33 ms) a few percent at most.
source benchmarks/gpu_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card"
TRITON_INTERPRET=0 timeout 150 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib \
  --timeout 140 tests/test_cudagraph_steps.py 2>&1 | tee "$OUT/tests-cudagraph-steps.log" | tail -15
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/step_graphs_models.py --device cuda \
  --suite zoo,hf --steps 5 --hang-s 140 2>&1 | tee "$OUT/step-graphs-models.log" | grep -v Warn | tail -12
MODELS=${TIMM_MODELS:-convnext_tiny,resnet50} BENCH_LIMIT=${TIMM_LIMIT:-230} \
  bash benchmarks/gpu_session.sh timm-train-cudagraphs
MODELS=${HF_MODELS:-bert,gpt2} BENCH_LIMIT=${HF_LIMIT:-190} \
  bash benchmarks/gpu_session.sh hf-train-cudagraphs
