# session 21 call 3: the walk's stores in two parts (vector stores of the lanes inside the row in
# its first and last blocks, the few lanes at each end one at a time): the sweep of the softmax
# over rows of 50257 again (call 1: heuristic X1 R8192 w32 53%, best R4096 w32 60%), then
# codegen-triton's walk/rounding/config/online tests on CUDA
set -o pipefail
cp .scratch/s21/call3.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
echo "=== sweep"; timeout 100 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 95 --json $OUT/sweep.json \
  --cases "softmax (rows of 50257)" --dtypes bfloat16,float32 2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel\|top\|%"  | head -40
echo "=== smoke"; timeout 250 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_aligned_rows.py packages/codegen-triton/tests/test_rounding_kept.py packages/codegen-triton/tests/test_reduction_config.py packages/codegen-triton/tests/test_online_softmax.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -12
