# session 22 call 3: the timm model tables at full size (bf16, fp32, batch 1 with CUDA graphs),
# eager vs torchkiln vs torch.compile in one run, on the committed code
set -o pipefail
cp .scratch/s22/call3.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
BENCH_LIMIT=215 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -9
BENCH_LIMIT=200 bash benchmarks/gpu_session.sh timm-full-fp32 2>&1 | tail -9
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-b1-cudagraphs 2>&1 | tail -9
