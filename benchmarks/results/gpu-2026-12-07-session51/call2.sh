#!/usr/bin/env bash
# session 51, call 2 (after call 1 on an H100): BERT's and GPT-2's bf16 training steps under
# reduce-overhead, both compilers, the step graphs on in this machine's copy.
# Prediction (session 48's default-mode steps: BERT about 27 ms, GPT-2 about 33 ms, both
# kernel-bound): a few percent at most; the hf backward graphs now record (call 1 says).
sed -i 's/^CUDA_STEP_GRAPHS = False/CUDA_STEP_GRAPHS = True/' \
  packages/torchkiln/src/torchkiln/cudagraph_steps.py
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
MODELS=${HF_MODELS:-bert,gpt2} BENCH_LIMIT=${HF_LIMIT:-560} \
  bash benchmarks/gpu_session.sh hf-train-cudagraphs
