# session 10 call 1: where inference stands at full size (start-of-session code, 0e46306)
nvidia-smi --query-gpu=name,memory.total --format=csv
BENCH_LIMIT=275 bash benchmarks/gpu_session.sh timm-full hf-full
cp .scratch/s10/call1.sh "$OUT/"
