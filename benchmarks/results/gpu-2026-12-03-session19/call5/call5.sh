# session 19 call 5 (fresh machine): the grouped online softmax with order kept (no can_reorder,
# after test_several_rows_per_program failed on CUDA with it): the online/aligned/config tests on
# CUDA, the softmax-type cases' bandwidth (torchkiln, bf16 and fp32), and which op of
# x * s + b parts from eager
set -o pipefail
cp .scratch/s19/call5.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0
echo "=== diag4"; timeout 60 python3 .scratch/s19/diag4.py 2>&1 | tee $OUT/diag4.log | grep -v "^    \|^def\|^$" | head -30
V="timeout 70 python3 benchmarks/gpu_bandwidth.py --hang-s 65 --compilers torchkiln --cases rows,32768,cross-entropy"
echo "=== bf16 + fp32"; $V --dtypes bfloat16,float32 --json $OUT/v-ordered.json 2>&1 | grep -v "^case\|^each" | tail -7
timeout 150 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_online_softmax.py packages/codegen-triton/tests/test_aligned_rows.py packages/codegen-triton/tests/test_reduction_config.py > $OUT/smoke.txt 2>&1; grep -v "^PASS" $OUT/smoke.txt | grep -v "^    \|^$" | tail -30
