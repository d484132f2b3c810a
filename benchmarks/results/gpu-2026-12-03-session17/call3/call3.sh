# session 17 call 3 (f8997c6): hf full size fp32 and hf batch 1 with CUDA graphs
set -o pipefail
cp .scratch/s17/call3.sh $OUT/
BENCH_LIMIT=280 bash benchmarks/gpu_session.sh hf-full-fp32 2>&1 | tail -3
BENCH_LIMIT=250 bash benchmarks/gpu_session.sh hf-b1-cudagraphs 2>&1 | tail -3
