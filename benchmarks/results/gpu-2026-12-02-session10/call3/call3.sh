# session 10 call 3: where float32 inference loses (bert, t5, efficientnet), mobilenetv3's host
# time (bf16), memory bandwidth (bf16); code of 0e46306 + gpu_kernel_profile --dtype
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
P=benchmarks/gpu_kernel_profile.py
{
timeout 170 python3 $P --suite hf --models bert,t5_encoder --tasks infer --dtype float32 --only torchkiln,inductor --out $OUT/hf32 --hang-s 165
timeout 90 python3 $P --suite timm --models efficientnet_b0 --tasks infer --dtype float32 --only torchkiln,inductor --out $OUT/timm32 --hang-s 85
timeout 110 python3 $P --suite timm --models mobilenetv3_large_100 --tasks infer --only torchkiln,inductor --host-profile --out $OUT/mnv3 --hang-s 105
timeout 150 python3 benchmarks/gpu_bandwidth.py --dtypes bfloat16 --json $OUT/bandwidth-bf16.json --hang-s 145
} 2>&1 | grep -v Warning > $OUT/call3.log
mv $OUT/hf32/debug-bert-infer.tar.gz $OUT/hf32/debug-t5_encoder-infer.tar.gz $OUT/mnv3/host-timm.txt $OUT/ 2>/dev/null
rm -rf $OUT/hf32 $OUT/timm32 $OUT/mnv3
cp .scratch/s10/call3.sh $OUT/
tail -5 $OUT/call3.log
