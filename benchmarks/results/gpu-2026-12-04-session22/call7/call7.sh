# session 22 call 7: outer (transposed) reductions at 16 and 32 values a thread
# (TritonOptions.transposed_values_per_thread, default 8: fewer warps, more loads in flight a
# thread), torchkiln alone, bf16 and fp32
set -o pipefail
cp .scratch/s22/call7.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
for v in 8 16 32; do
  echo "=== transposed_values_per_thread $v"; timeout 70 python3 benchmarks/gpu_bandwidth.py --hang-s 65 --dtypes bfloat16,float32 --compilers torchkiln \
    --cases "column,bn ,layer norm backward" --triton-options "{\"transposed_values_per_thread\": $v}" 2>&1 | tee -a $OUT/bandwidth-outer.log | grep -v "^each\|^case" | tail -12
done
