# session 17 call 6 (878d68c: loop-ir 0.8.9, direct-convolution taps in the weight's own dtype again; dynamo-capture
# 0.9.7; test_codegen_triton_e2e's device-aware structure checks): CUDA tests, MobileNetV3 and EfficientNet-B0
# bf16 at full size, their depthwise shapes in bf16, dynamo-capture's tests on Python 3.12
set -o pipefail
cp .scratch/s17/call6.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
CUDA_TESTS_LIMIT=60 bash benchmarks/gpu_session.sh cuda-tests 2>&1 | tail -8
MODELS=mobilenetv3_large_100,efficientnet_b0 BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-full 2>&1 | grep -v "WARN\|already exists" | tail -12
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache
TRITON_INTERPRET=0 timeout 80 python3 benchmarks/gpu_direct_conv.py --models mobilenetv3_large_100,efficientnet_b0 \
  --dtypes bfloat16 --hang-s 75 --json $OUT/direct-conv.json 2>&1 | tee $OUT/direct-conv.log | grep "^=="
timeout 100 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 14 --timeout 90 -k "not triton" \
  packages/dynamo-capture/tests 2>&1 | tee $OUT/tests-py312-capture.log | tail -3
