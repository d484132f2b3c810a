# session 22 call 1: session 21's _tk_rounded on the 16-bit value (unmeasured), the looped float32
# Welford as shifted sums (mean of the first block as the shift), and the r-loop software
# pipelining option (TritonOptions.loop_stages, off by default): the rounding check, every
# bandwidth case in bf16 (eager, torchkiln, torch.compile), torchkiln alone at loop_stages 2 and
# 3, then the reduction/rounding/aligned tests on CUDA
set -o pipefail
cp .scratch/s22/call1.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
echo "=== rounding"; timeout 70 python3 benchmarks/gpu_rounding_check.py --hang-s 65 --json $OUT/rounding.json 2>&1 | tee $OUT/rounding.log | grep -v "Warn\|warn" | tail -25
echo "=== bandwidth"; timeout 150 python3 benchmarks/gpu_bandwidth.py --hang-s 145 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log | grep -v "^each" | tail -19
for st in 2 3; do
  echo "=== loop_stages $st"; timeout 75 python3 benchmarks/gpu_bandwidth.py --hang-s 70 --dtypes bfloat16 --compilers torchkiln \
    --cases "column,bn ,backward,log_softmax,cross" --triton-options "{\"loop_stages\": $st}" --json $OUT/bandwidth-stages$st.json 2>&1 | tee $OUT/bandwidth-stages$st.log | grep -v "^each" | tail -10
done
echo "=== smoke"; timeout 120 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_reductions.py packages/codegen-triton/tests/test_rounding_kept.py packages/codegen-triton/tests/test_aligned_rows.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -12
