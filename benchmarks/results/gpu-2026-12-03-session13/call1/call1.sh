# session 13 call 1: where resnet50/mobilenetv3 time goes (host vs GPU, rounds), where fp32 bert/llama lose 1%,
# bandwidth with the final outer rule, timm-full bf16 again
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s13/call1.sh $OUT/
TRITON_INTERPRET=0 timeout 110 python3 benchmarks/gpu_kernel_profile.py --hang-s 105 --suite timm --models resnet50,mobilenetv3_large_100 --tasks infer --host-profile --out $OUT/timm 2>&1 | grep -v "^  " | tail -30
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_kernel_profile.py --hang-s 145 --suite hf --models bert,llama --tasks infer --dtype float32 --out $OUT/fp32 2>&1 | tail -90
TRITON_INTERPRET=0 timeout 80 python3 benchmarks/gpu_bandwidth.py --hang-s 75 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log | grep -v "Warn\|warn\|Online\|split the\|important\|softmax\.$\|^$"
BENCH_LIMIT=140 bash benchmarks/gpu_session.sh timm-full 2>&1 | tail -12
