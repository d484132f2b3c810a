#!/usr/bin/env bash
# session 40, call 2: LoopIROptions.mixed_order_narrow_programs (narrow rows' mixed-order kernels
# at up to 4x the target programs): the layer norm backward over rows of 768 at 1x, 2x, 4x the
# programs; ConvNeXt-tiny's and BERT's training steps, default against a scale of 1; then the
# test suites on Python 3.12 (codegen-triton 0.9.21's configs, the pool size fix untested there)
source benchmarks/gpu_env.sh  # (these calls ran its lines inline)
uptime
for rw in "3136 768" "8192 768"; do
  set -- $rw
  for sp in 528 1056 2112; do
    echo "== rows $1 x $2 programs $sp"
    timeout -s ABRT 40 python3 benchmarks/gpu_bandwidth.py --cases "layer norm backward" --rows $1 --width $2 \
      --dtypes bfloat16 --compilers torchkiln --hang-s 35 --split-programs $sp \
      --loop-ir '{"mixed_order_narrow_programs": 1}' 2>&1 | grep -v Warning | tail -1
  done
done 2>&1 | tee $OUT/sweep768.log
timeout -s ABRT 120 python3 benchmarks/gpu_options_ab.py --suite timm --model convnext_tiny --batch 64 \
  --rounds 10 --steps 10 --hang-s 110 --a '{}' --b '{"loop_ir": {"mixed_order_narrow_programs": 1}}' \
  2>&1 | grep -v Warning | tee $OUT/ab-convnext.log | tail -2
timeout -s ABRT 120 python3 benchmarks/gpu_options_ab.py --suite hf --model bert --rounds 10 --steps 5 \
  --hang-s 110 --a '{}' --b '{"loop_ir": {"mixed_order_narrow_programs": 1}}' \
  2>&1 | grep -v Warning | tee $OUT/ab-bert.log | tail -2
PY312_LIMIT=290 bash benchmarks/gpu_session.sh py312 > "$OUT/py312.log" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/py312.log" | tail -20
