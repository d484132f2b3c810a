# session 15 call 2 (code of 92ead40): the final inference tables: hf and timm full size in bfloat16, hf in float32,
# hf at batch 1 with CUDA graphs (timm fp32 and timm batch 1 are call 1's, same code)
set -o pipefail
cp .scratch/s15/call2.sh $OUT/
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -4
BENCH_LIMIT=140 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -4
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh hf-full-fp32 2>&1 | tail -4
BENCH_LIMIT=130 bash benchmarks/gpu_session.sh hf-b1-cudagraphs 2>&1 | tail -16
