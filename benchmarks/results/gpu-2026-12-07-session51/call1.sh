#!/usr/bin/env bash
# session 51, call 1: whichever card comes. An H200: the full-size bf16 tables (session 49's
# call 3). An H100: the step graphs again, with CUDA_STEP_GRAPHS on (turned on below):
# session 50's two findings read as rounding noise in gradients that are zero in exact
# arithmetic (a convolution's bias before batch norm, amplified by AdamW; BERT's key bias
# before softmax, compared relative to its own tiny values). The tests now compare each step's
# gradients against the step's largest; step_graphs_models.py the same. Then ConvNeXt-tiny's
# training step under reduce-overhead, both compilers.
# Prediction: tests pass (both dtypes), every model "ok" with the hf models' backward "on" (the
# attention's CPU random state no longer refuses it); ConvNeXt-tiny's bf16 step at batch 64
# near its kernel time, 14-16 ms against the default mode's 18-21 ms.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [[ $card == *H200* ]]; then
  exec bash benchmarks/results/gpu-2026-12-07-session49/call3.sh
fi
# this machine's copy only: the step graphs on for the bench too (the tests and
# step_graphs_models.py turn them on themselves)
sed -i 's/^CUDA_STEP_GRAPHS = False/CUDA_STEP_GRAPHS = True/' \
  packages/torchkiln/src/torchkiln/cudagraph_steps.py
grep -n "^CUDA_STEP_GRAPHS" packages/torchkiln/src/torchkiln/cudagraph_steps.py
source benchmarks/gpu_env.sh
echo "card: $card"
TRITON_INTERPRET=0 timeout 150 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib \
  --timeout 140 tests/test_cudagraph_steps.py 2>&1 | tee "$OUT/tests-cudagraph-steps.log" | grep -v "^DEBUG" | tail -25
TRITON_INTERPRET=0 timeout 170 python3 benchmarks/step_graphs_models.py --device cuda \
  --suite zoo,hf --steps 5 --hang-s 160 2>&1 | tee "$OUT/step-graphs-models.log" | grep -v Warn | tail -12
MODELS=${TIMM_MODELS:-convnext_tiny} BENCH_LIMIT=${TIMM_LIMIT:-250} \
  bash benchmarks/gpu_session.sh timm-train-cudagraphs
