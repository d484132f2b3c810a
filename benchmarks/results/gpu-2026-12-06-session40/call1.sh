#!/usr/bin/env bash
# session 40, call 1: (a) ConvNeXt-tiny's training step with narrow mixed-order rows a tile at a
# time (mixed_rows 0, the default since codegen-triton 0.9.21) against one pipelined row (1);
# (b) the layer norm backward over rows of 192 and 384 (ConvNeXt-tiny's stages 2 and 3) with more
# programs (LoopIROptions.split_programs: the mixed-order kernel's programs)
source benchmarks/gpu_env.sh  # (these calls ran its lines inline)
uptime
timeout -s ABRT 200 python3 benchmarks/gpu_options_ab.py --suite timm --model convnext_tiny --batch 64 \
  --rounds 10 --steps 10 --hang-s 190 --a '{}' --b '{"triton_options": {"mixed_rows": 1}}' \
  2>&1 | grep -v Warning | tee $OUT/ab-convnext.log | tail -4
for rw in "50176 192" "12544 384" "200704 96"; do
  set -- $rw
  for sp in 0 1056 2112 4224; do
    extra=""; [ $sp != 0 ] && extra="--split-programs $sp"
    echo "== rows $1 x $2 split_programs ${sp:-default}"
    timeout -s ABRT 60 python3 benchmarks/gpu_bandwidth.py --cases "layer norm backward" --rows $1 --width $2 \
      --dtypes bfloat16 --compilers torchkiln --hang-s 55 $extra 2>&1 | grep -v Warning | tail -2
  done
done 2>&1 | tee $OUT/sweep.log
