# session 16 call 5 (the budget's last 297 s): EfficientNet-B0 bf16 at batch 128 after the direct convolution's
# input is realized (call 2: 11.33 ms, 0.49x torch.compile's: the expand convolution's bias + SiLU was inlined
# into the depthwise convolution and recomputed at each of its 25 taps)
set -o pipefail
cp .scratch/s16/call5.sh $OUT/
MODELS=efficientnet_b0 BENCH_LIMIT=75 bash benchmarks/gpu_session.sh timm-full 2>&1 | grep -v "WARN\|already exists" | tail -14
