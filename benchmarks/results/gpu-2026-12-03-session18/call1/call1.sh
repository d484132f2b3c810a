# session 18 call 1: codegen-triton's L2 eviction hints (a looped reduction's first read of a row
# evict_last, its last read evict_first): every bandwidth case with them, the long-row cases
# without them (the same process kind, for the before), and the launch-configuration sweep of
# the cases below 85% with them
set -o pipefail
cp .scratch/s18/call1.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | tail -22
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0
timeout 70 python3 benchmarks/gpu_bandwidth.py --hang-s 65 --dtypes bfloat16 \
  --cases "rows of,32768,cross-entropy,layer norm" --triton-options '{"eviction_hints": false}' \
  --json $OUT/bandwidth-noevict.json 2>&1 | tee $OUT/bandwidth-noevict.log | tail -8
timeout 280 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 270 --json $OUT/sweep.json \
  --cases "log_softmax (32768),softmax (rows of 50257),cross-entropy (50257),bn stats nhwc,bn stats nchw,layer norm backward,gelu backward,bn bwd sums nhwc" \
  2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel"
