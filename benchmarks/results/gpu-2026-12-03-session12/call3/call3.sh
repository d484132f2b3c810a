# session 12 call 3: which of the three new launch rules slowed mobilenetv3 (tk 2.87 -> 3.94 ms in call 2)?
# variants of one model in one call (no torch.compile), then the sweep of the cases the rules moved down
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
run() {  # run <name> <triton options json>
  echo "=== $1 $2"
  timeout 70 python3 -m torchkiln bench --device cuda --dtype bfloat16 --no-progress --suite timm --size full \
    --models ${M:-mobilenetv3_large_100} --no-peer --repeat 8 --options "{\"triton_options\": $2}" \
    --json $OUT/mnv3-$1.json > /tmp/mnv3-$1.log 2>&1 || tail -5 /tmp/mnv3-$1.log
  python3 -c "import json,sys; [print(r['model'], 'eager', round(r['eager_ms'],3), 'tk', round(r['torchkiln_ms'],3), r['accuracy'], r['rounds_ms']) for r in json.load(open(sys.argv[1]))['rows']]" $OUT/mnv3-$1.json
}
run new '{}'
run old '{"pointwise_xblock": 512, "looped_rblock": 4096, "looped_values_per_thread": 16, "transposed_values_per_thread": 16}'
run old-pointwise '{"pointwise_xblock": 512}'
run old-transposed '{"transposed_values_per_thread": 16}'
run old-looped '{"looped_rblock": 4096, "looped_values_per_thread": 16}'
run new2 '{}'
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 140 --json $OUT/sweep2.json \
  --cases "log_softmax (32768),bn bwd sums nchw,bn bwd sums nhwc,cross-entropy (50257),bn stats nhwc" 2>&1 \
  | tee $OUT/sweep2.log | grep -v "^   X" | grep "==\|kernel\|top"
