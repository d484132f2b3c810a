# session 15 call 3 (loop-ir: a row reduction and a column reduction of the same sizes no longer share a kernel):
# the layer norm backward's kernels and bandwidth (9% in call 1: the weight gradient's partial column sums were fused into
# the row kernel, which read them a cache line per value), bn stats; timm full size bf16 again (call 2's resnet50 rounds
# were disturbed: eager too ran 8% slower in rounds 1-6)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s15/call3.sh $OUT/
TRITON_INTERPRET=0 timeout 80 python3 benchmarks/gpu_bandwidth.py --hang-s 75 --dtypes bfloat16 --profile --cases "layer norm backward,bn stats,softmax (rows" --json $OUT/bandwidth-profile.json 2>&1 | tee $OUT/bandwidth-profile.log | grep -v "Warn\|warn\|Online\|split the\|important\|softmax\.$\|^$\|USDT"
BENCH_LIMIT=140 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -4
