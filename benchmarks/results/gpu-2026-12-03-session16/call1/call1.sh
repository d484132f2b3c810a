# session 16 call 1: direct convolutions (loop-ir, uncommitted: depthwise and stem convolutions as generated code
# with their bias and activation fused, instead of cuDNN) per shape against cuDNN; timm full size bf16 with them
# (and loop-ir 0.8.7's peak memory); mobilenetv3 b128 host vs device; codegen-triton 0.9.3's layer norm backward
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s16/call1.sh $OUT/
git diff HEAD --stat > $OUT/diff-stat.txt 2>&1
TRITON_INTERPRET=0 timeout 210 python3 benchmarks/gpu_direct_conv.py --hang-s 205 --json $OUT/direct-conv.json 2>&1 | tee $OUT/direct-conv.log | grep -v "Warn\|warn\|^$"
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -4
TRITON_INTERPRET=0 timeout 90 python3 benchmarks/gpu_kernel_profile.py --hang-s 85 --suite timm --models mobilenetv3_large_100 --tasks infer --only torchkiln,inductor --host-profile --out $OUT/mnv3 2>&1 | grep -v "^  " | tail -40
head -50 $OUT/mnv3/host-timm.txt
TRITON_INTERPRET=0 timeout 50 python3 benchmarks/gpu_bandwidth.py --hang-s 45 --dtypes bfloat16 --profile --cases "layer norm backward" --json $OUT/bandwidth-profile.json 2>&1 | tee $OUT/bandwidth-profile.log | grep -v "Warn\|warn\|Online\|split the\|important\|softmax\.$\|^$\|USDT" | tail -20
