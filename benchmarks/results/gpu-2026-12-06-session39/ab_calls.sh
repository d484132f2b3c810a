#!/usr/bin/env bash
# session 39, call 2: the column sums of a layer norm backward's input gradient in its mixed-order
# kernel (loop-ir: mixed_order_reductions True now also takes a value the row kernel computes).
# ConvNeXt-tiny's training step, A: generated_conv_bias_grads on (the 18 depthwise convolutions'
# bias gradients become a third partial of the layer-norm backward), B: off (ATen's reductions);
# then BERT's and GPT-2's, A: default, B: mixed_order_reductions "loaded" (0.8.25's rule)
export OUT=${OUT:-/tmp/out}
git log --oneline -1 > "$OUT/commit.txt"; nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/commit.txt"
cat "$OUT/commit.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
uptime
timeout -s ABRT 200 python3 benchmarks/gpu_options_ab.py --suite timm --model convnext_tiny --batch 64 \
  --rounds 10 --steps 10 --hang-s 190 --a '{"loop_ir": {"generated_conv_bias_grads": true}}' --b '{}' \
  2>&1 | grep -v Warning | tee $OUT/ab-convnext.log | tail -4
for m in bert gpt2; do
  timeout -s ABRT 150 python3 benchmarks/gpu_options_ab.py --suite hf --model $m --rounds 10 --steps 5 --hang-s 140 \
    --b '{"loop_ir": {"mixed_order_reductions": "loaded"}}' 2>&1 | grep -v Warning | tee $OUT/ab-$m.log | tail -4
done
