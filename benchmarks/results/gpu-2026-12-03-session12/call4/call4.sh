# session 12 call 4: final launch rules (looped RBLOCK 2048 w8, outer looped 8 values/thread, bf16 pointwise XBLOCK 2048):
# bandwidth of every case, sweep of the batch-norm backward sums, timm-full bf16 again (call 2's ran on a slow GPU)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
TRITON_INTERPRET=0 timeout 80 python3 benchmarks/gpu_bandwidth.py --hang-s 75 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log | grep -v "Warn\|warn\|Online\|split the\|important\|softmax\.$\|^$"
TRITON_INTERPRET=0 timeout 100 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 95 --json $OUT/sweep3.json \
  --cases "bn bwd sums nhwc,bn bwd sums nchw" 2>&1 | tee $OUT/sweep3.log | grep -v "^   X" | grep "==\|kernel\|top"
BENCH_LIMIT=130 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -12
