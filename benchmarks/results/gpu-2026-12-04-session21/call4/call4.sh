# session 21 call 4: is the softmax over rows of 50257 slow for its walk (rows off a 16-byte
# boundary) or its last, mostly empty block? The generated softmax over rows of 49152 (three
# full blocks of 16384), 50176 (on a boundary, a last block of 1024 values) and 50256 (on a
# boundary, 1104 values), bf16, 4096 rows, each under the sweep's launch configurations
set -o pipefail
cp .scratch/s21/call4.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
for w in 49152 50176 50256; do
echo "=== width $w"; timeout 80 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 75 --json $OUT/sweep-$w.json \
  --cases "softmax (last dim)" --width $w --rows 4096 --dtypes bfloat16 2>&1 | tee $OUT/sweep-$w.log | grep -v "^   X" | grep "==\|kernel\|top\|%"  | head -10
done
