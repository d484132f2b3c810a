# session 22 call 4: the hf model tables at full size (bf16, fp32), eager vs torchkiln vs
# torch.compile in one run, on the committed code
set -o pipefail
cp .scratch/s22/call4.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
BENCH_LIMIT=300 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -9
BENCH_LIMIT=260 bash benchmarks/gpu_session.sh hf-full-fp32 2>&1 | tail -9
