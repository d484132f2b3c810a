# session 16 call 2: loop-ir with direct depthwise convolutions (16-bit: up to 5x5, float32: up to 7x7; stems and
# grouped convolutions stay cuDNN's, as call 1's per-shape run said) and channels-last fakes with ATen's strides
# for size-1 dims (call 1's MobileNetV3 copied 17 squeeze-excitation results a call); timm full size bf16 and fp32,
# timm batch 1 with CUDA graphs
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
cp .scratch/s16/call2.sh $OUT/
git diff HEAD --stat > $OUT/diff-stat.txt 2>&1
BENCH_LIMIT=215 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -3
BENCH_LIMIT=205 bash benchmarks/gpu_session.sh timm-full-fp32 2>&1 | tail -3
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-b1-cudagraphs 2>&1 | tail -3
