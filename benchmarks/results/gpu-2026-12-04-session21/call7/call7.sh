# session 21 call 7: the walk's first block a loop of a run-time bound, and reread kernels at 32
# warps capped at 32 registers (Config.maxnreg): two programs a SM. The sweep of the softmax
# over rows of 50257 (bf16, fp32: the cap on and off at 32 warps), every bandwidth case in bf16,
# the softmax-type cases in fp32, then the walk/config/launch tests on CUDA (maxnreg through
# warmup, the compile pool and the fast launch)
set -o pipefail
cp .scratch/s21/call7.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
echo "=== sweep"; timeout 110 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 105 --json $OUT/sweep.json \
  --cases "softmax (rows of 50257)" --dtypes bfloat16,float32 2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel\|top\|%"  | head -20
echo "=== bandwidth"; OUT=$OUT BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | tail -22
echo "=== fp32"; timeout 70 python3 benchmarks/gpu_bandwidth.py --hang-s 65 --cases rows,32768,cross-entropy --dtypes float32 --json $OUT/bandwidth-fp32.json 2>&1 | tee $OUT/bandwidth-fp32.log | grep -v "^each" | tail -6
echo "=== smoke"; timeout 150 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_aligned_rows.py packages/codegen-triton/tests/test_fast_launch.py packages/codegen-triton/tests/test_precompile.py packages/codegen-triton/tests/test_compile_pool.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -12
