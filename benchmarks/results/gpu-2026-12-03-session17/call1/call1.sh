# session 17 call 1: the shipped code (f8997c6: depthwise direct up to 25 taps in every dtype, float32 taps,
# no select after a masked load) on timm full size bf16 and fp32, and timm batch 1 with CUDA graphs
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
cp .scratch/s17/call1.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
BENCH_LIMIT=215 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -3
BENCH_LIMIT=205 bash benchmarks/gpu_session.sh timm-full-fp32 2>&1 | tail -3
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-b1-cudagraphs 2>&1 | tail -3
