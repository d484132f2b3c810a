#!/usr/bin/env bash
# session 51, call 4: call 3 without its bench (the device budget left: 465 s). The
# step-graph CUDA tests and BERT's small config, both as call 3 says.
sed -i 's/^CUDA_STEP_GRAPHS = False/CUDA_STEP_GRAPHS = True/' \
  packages/torchkiln/src/torchkiln/cudagraph_steps.py
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
TRITON_INTERPRET=0 timeout 110 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib \
  --timeout 100 tests/test_cudagraph_steps.py 2>&1 | tee "$OUT/tests-cudagraph-steps.log" | grep -v "^DEBUG" | tail -25
TRITON_INTERPRET=0 timeout 90 python3 benchmarks/step_graphs_models.py --device cuda \
  --suite hf --models bert,gpt2 --steps 5 --hang-s 85 2>&1 | tee "$OUT/step-graphs-models.log" | grep -v Warn | tail -4
