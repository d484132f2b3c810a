# session 21 call 1 (cba71b7 + the rounding check's subnormal step, the probe's second-pass study):
# the rounding check, why the softmax over long rows misses the bandwidth (hand-written second
# passes over rows of 32768/49152/65536), the sweep of the softmax over rows of 50257, and
# codegen-triton's walk/rounding/config/online tests on CUDA
set -o pipefail
cp .scratch/s21/call1.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
echo "=== rounding"; timeout 70 python3 benchmarks/gpu_rounding_check.py --hang-s 65 --json $OUT/rounding.json 2>&1 | tee $OUT/rounding.log | grep -v "Warn\|warn"
echo "=== probe"; timeout 150 python3 benchmarks/gpu_softmax_probe.py --second-pass --hang-s 145 --json $OUT/probe2.json 2>&1 | tee $OUT/probe2.log | grep -v "Warn\|warn"
echo "=== sweep"; timeout 100 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 95 --json $OUT/sweep.json \
  --cases "softmax (rows of 50257)" --dtypes bfloat16,float32 2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel\|top\|%"  | head -40
echo "=== smoke"; timeout 130 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_aligned_rows.py packages/codegen-triton/tests/test_rounding_kept.py packages/codegen-triton/tests/test_reduction_config.py packages/codegen-triton/tests/test_online_softmax.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -12
