# session 16 call 3 (warm, right after call 2): the direct convolutions' tests with real kernels on the H200 (the
# op-level suite's conv_direct spec on CUDA, the CUDA default-options tests), MobileNetV3 bf16 again
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s16/call3.sh $OUT/
PYTEST="python3 -m pytest -q -p no:cacheprovider --import-mode=importlib"
TRITON_INTERPRET=0 timeout 70 $PYTEST -n 4 --timeout 60 tests/test_direct_convolution_e2e.py tests/test_channels_last_e2e.py 2>&1 | tail -3
TRITON_INTERPRET=0 PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" timeout 60 $PYTEST -n 4 --timeout 50 -p cuda_default_plugin tests/test_ops_codegen.py -k "triton and (conv_direct or convolution or pool)" 2>&1 | tail -3
MODELS=mobilenetv3_large_100 BENCH_LIMIT=80 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -2
