# session 17 call 5: as call 4; the CUDA-only tests with real kernels (call 4's py312 section ran them under the interpreter)
set -o pipefail
cp .scratch/s17/call5.sh $OUT/
CUDA_TESTS_LIMIT=150 bash benchmarks/gpu_session.sh cuda-tests 2>&1 | tail -15
