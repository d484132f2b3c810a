#!/usr/bin/env bash
# session 40, call 3: ConvNeXt-tiny's training step, narrow mixed-order rows at up to 4x the
# programs (default) against 1x, rows of 768 now 1x (call 2: 2x neutral, 4x slower); more rounds
# (call 3: 16 rounds, call 4: 24; calls 3-4 ran rows of 384 at 2x (1024 // width), call 5 the
# final rule: rows of at most 512 values 4x)
source benchmarks/gpu_env.sh  # (these calls ran its lines inline)
timeout -s ABRT 150 python3 benchmarks/gpu_options_ab.py --suite timm --model convnext_tiny --batch 64 \
  --rounds 16 --steps 10 --hang-s 140 --a '{}' --b '{"loop_ir": {"mixed_order_narrow_programs": 1}}' \
  2>&1 | grep -v Warning | tee $OUT/ab-convnext.log | tail -3
