# session 17 call 7 (as call 6): MobileNetV3 and EfficientNet-B0 at batch 1 with CUDA graphs
set -o pipefail
cp .scratch/s17/call7.sh $OUT/
MODELS=mobilenetv3_large_100,efficientnet_b0 BENCH_LIMIT=170 bash benchmarks/gpu_session.sh timm-b1-cudagraphs 2>&1 | grep -v "WARN\|already exists" | tail -4
