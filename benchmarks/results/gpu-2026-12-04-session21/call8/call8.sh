# session 21 call 8: rows of more than 128 KB read twice take one program a SM, uncapped, RBLOCK
# 16384 (float32 rows of 50257; call 7's sweep: 80% there, 66% at the capped 4096): the softmax
# over rows of 50257 in bf16 and fp32 against eager and torch.compile, then the launch tests on
# CUDA (maxnreg through warmup, the compile pool and the fast launch)
set -o pipefail
cp .scratch/s21/call8.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
echo "=== bandwidth"; timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --cases "rows of 50257" --dtypes bfloat16,float32 --json $OUT/bandwidth-50257.json 2>&1 | tee $OUT/bandwidth-50257.log | grep -v "^each" | tail -4
echo "=== smoke"; timeout 110 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_fast_launch.py packages/codegen-triton/tests/test_precompile.py packages/codegen-triton/tests/test_compile_pool.py packages/codegen-triton/tests/test_reduction_config.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -8
