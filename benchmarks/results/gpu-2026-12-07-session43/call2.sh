#!/usr/bin/env bash
# session 43, call 2: the template's tiles forced through torchkiln on ConvNeXt-tiny's fc1s
# (short K) and BERT's at batch 1, against templates off; ConvNeXt-tiny default (the predicted
# policy: K >= 512, 0.92) against never; then with autotune (templates timed, narrower tiles
# for short K) against autotune without templates
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_template_check.py --hang-s 145 --tiles 128x128x64:8:3,128x256x64:8:3,128x128x32:8:2,128x128x32:4:2,64x128x32:4:2,64x256x32:8:2,128x64x32:4:2 --cases "convnext,bert intermediate (batch" 2>&1 | grep -v Warning | tee $OUT/template-tiles.log | sed -e 's/ err [^|]*\[[^]]*\]//g'
TRITON_INTERPRET=0 timeout 90 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite timm --model convnext_tiny --rounds 6 --steps 10 --hang-s 85 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-convnext.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext.log; grep -h "linear:" $OUT/ab-convnext.log | grep "A linear" | cut -c1-220 | head -8
TRITON_INTERPRET=0 timeout 130 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite timm --model convnext_tiny --rounds 6 --steps 10 --hang-s 125 --a '{"autotune": true}' --b '{"autotune": true, "loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-convnext-autotune.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext-autotune.log; grep -h "linear:" $OUT/ab-convnext-autotune.log | grep "A linear" | cut -c1-260 | head -8
