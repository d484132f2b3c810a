# session 10 call 2: float32 inference and batch-1 reduce-overhead at full size (code of 0e46306)
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-full-fp32
BENCH_LIMIT=140 bash benchmarks/gpu_session.sh hf-full-fp32
BENCH_LIMIT=135 bash benchmarks/gpu_session.sh timm-b1-cudagraphs
BENCH_LIMIT=125 bash benchmarks/gpu_session.sh hf-b1-cudagraphs
cp .scratch/s10/call2.sh "$OUT/"
