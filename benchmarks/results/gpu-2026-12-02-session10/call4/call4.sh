# session 10 call 4: after the realize, inline-cost and 1x1-convolution changes (code of HEAD)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
TRITON_INTERPRET=0 timeout 45 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib -n 4 \
  tests/test_channels_last_e2e.py tests/test_float_sizes_e2e.py 2>&1 | tail -3 | tee $OUT/tests-cuda.log
BENCH_LIMIT=125 bash benchmarks/gpu_session.sh timm-full
BENCH_LIMIT=135 bash benchmarks/gpu_session.sh hf-full-fp32
BENCH_LIMIT=115 bash benchmarks/gpu_session.sh hf-full
cp .scratch/s10/call4.sh $OUT/
