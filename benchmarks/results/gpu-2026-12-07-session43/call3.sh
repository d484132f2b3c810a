#!/usr/bin/env bash
# session 43, call 3 (call 2 never ran: no machine): ConvNeXt-tiny default (the predicted
# policy: K >= 512, 0.92) against templates off; then the template's tiles forced through
# torchkiln on ConvNeXt-tiny's first three fc1s (short K), against templates off
source benchmarks/gpu_env.sh
TRITON_INTERPRET=0 timeout 85 python3 benchmarks/gpu_options_ab.py --infer --dtype bfloat16 --suite timm --model convnext_tiny --rounds 6 --steps 10 --hang-s 80 --b '{"loop_ir": {"matmul_templates": "never"}}' > $OUT/ab-convnext.log 2>&1; grep -h "compiled in\|B / A" $OUT/ab-convnext.log; grep -h "A linear" $OUT/ab-convnext.log | cut -c1-220 | head -8
TRITON_INTERPRET=0 timeout 100 python3 benchmarks/gpu_template_check.py --hang-s 95 --tiles 128x128x32:4:2,64x128x32:4:2,64x256x32:8:2,128x64x32:4:2 --cases "convnext-tiny stage 1,convnext-tiny stage 2,convnext-tiny stage 3" 2>&1 | grep -v Warning | tee $OUT/template-tiles.log | sed -e 's/ err [^|]*\[[^]]*\]//g'
