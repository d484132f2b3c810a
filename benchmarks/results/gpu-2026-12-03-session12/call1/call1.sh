# session 12 call 1: launch-config sweep of the memory-bound kernels, bandwidth both ways, fp32 hf (code of HEAD)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
TRITON_INTERPRET=0 timeout 230 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 220 --json $OUT/sweep.json --sources $OUT/sweep-sources.py 2>&1 | tee $OUT/sweep.log | grep -v "^   X"
TRITON_INTERPRET=0 timeout 140 python3 benchmarks/gpu_bandwidth.py --hang-s 130 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log
BENCH_LIMIT=140 bash benchmarks/gpu_session.sh hf-full-fp32
cp .scratch/s12/call1.sh $OUT/
