# session 22 call 2: the looped float32 Welford as per-lane shifted sums (each lane's first value)
# against Welford's update (welford_shifted_sums false), bn statistics in bf16 and fp32, torchkiln
# alone; then the reduction tests on CUDA (call 1's two failures were the row-shared shift)
set -o pipefail
cp .scratch/s22/call2.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
for sh in true false true; do
  echo "=== welford_shifted_sums $sh"; timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --dtypes bfloat16,float32 --compilers torchkiln \
    --cases "bn stats" --triton-options "{\"welford_shifted_sums\": $sh}" 2>&1 | tee -a $OUT/bandwidth-welford.log | grep -v "^each" | tail -4
done
echo "=== smoke"; timeout 150 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_reductions.py packages/codegen-triton/tests/test_reduction_config.py packages/codegen-triton/tests/test_aligned_rows.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -12
