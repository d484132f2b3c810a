# session 17 call 2 (f8997c6): direct convolutions shape by shape after float32 taps and no select after a
# masked load (sm_90 counts: 5x5 bf16 184.5 -> 122.5 instructions a value); hf full size bf16
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
cp .scratch/s17/call2.sh $OUT/
DIRECT_LIMIT=200 bash benchmarks/gpu_session.sh direct-conv 2>&1 | tail -30
BENCH_LIMIT=360 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -3
