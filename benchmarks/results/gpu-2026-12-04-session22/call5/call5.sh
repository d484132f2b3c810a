# session 22 call 5: the hf models at batch 1 with CUDA graphs (mode="reduce-overhead", both
# compilers), then every bandwidth case in float32 (eager, torchkiln, torch.compile)
set -o pipefail
cp .scratch/s22/call5.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
BENCH_LIMIT=230 bash benchmarks/gpu_session.sh hf-b1-cudagraphs 2>&1 | tail -9
echo "=== bandwidth fp32"; timeout 110 python3 benchmarks/gpu_bandwidth.py --hang-s 105 --dtypes float32 --json $OUT/bandwidth-fp32.json 2>&1 | tee $OUT/bandwidth-fp32.log | grep -v "^each\|warn\|Warn\|^$\|Online\|split the\|important use" | tail -19
