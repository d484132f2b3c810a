# session 21 call 5: the walk on rows that start on a 16-byte boundary (50264 values: a multiple of 8,
# not of 16, so the walk applies, rshift 0 in every row): its code, without the misalignment
# (call 4: 50256 plain 72%; 50257 walked 53%)
set -o pipefail
cp .scratch/s21/call5.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
for w in 50264; do
echo "=== width $w"; timeout 80 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 75 --json $OUT/sweep-$w.json \
  --cases "softmax (last dim)" --width $w --rows 4096 --dtypes bfloat16 2>&1 | tee $OUT/sweep-$w.log | grep -v "^   X" | grep "==\|kernel\|top\|%"  | head -10
done
