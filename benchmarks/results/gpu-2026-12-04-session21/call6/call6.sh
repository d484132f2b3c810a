# session 21 call 6: the sweep now prints each configuration's registers a thread (n_regs of the binary Triton 3.6
# compiled on the device): the walk (50264) against the plain loop (50256), is the walk losing
# occupancy (more than 32 registers at 32 warps: one program a SM)?
set -o pipefail
cp .scratch/s21/call6.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
for w in 50264 50256; do
echo "=== width $w"; timeout 80 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 75 --json $OUT/sweep-$w.json \
  --cases "softmax (last dim)" --width $w --rows 4096 --dtypes bfloat16 2>&1 | tee $OUT/sweep-$w.log | grep -v "^   X" | grep "==\|kernel\|top\|%"  | head -10
done
