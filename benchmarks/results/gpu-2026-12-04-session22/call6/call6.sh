# session 22 call 6: the aligned walk visits the row's last block in the first loop's iteration
# (its loads issued with the first block's): the vocabulary-wide cases in bf16 (eager, torchkiln,
# torch.compile), every bandwidth case in fp32, then the aligned-walk tests on CUDA
set -o pipefail
cp .scratch/s22/call6.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
F="^each\|warn\|Warn\|^$\|Online\|split the\|important use\|^ *warnings"
echo "=== vocabulary bf16"; timeout 80 python3 benchmarks/gpu_bandwidth.py --hang-s 75 --dtypes bfloat16 --cases "rows of 50257,cross,log_softmax" --json $OUT/bandwidth-vocab-bf16.json 2>&1 | grep -v "$F" | tail -4
echo "=== bandwidth fp32"; timeout 130 python3 benchmarks/gpu_bandwidth.py --hang-s 125 --dtypes float32 --json $OUT/bandwidth-fp32.json 2>&1 | grep -v "$F" | tail -18
echo "=== smoke"; timeout 150 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_aligned_rows.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -8
