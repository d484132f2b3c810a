# session 21 call 2: the probe's second-pass study again (call 1's stopped at its log_softmax
# tolerance, now relative)
set -o pipefail
cp .scratch/s21/call2.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
timeout 200 python3 benchmarks/gpu_softmax_probe.py --second-pass --hang-s 195 --json $OUT/probe2.json 2>&1 | tee $OUT/probe2.log | grep -v "Warn\|warn"
