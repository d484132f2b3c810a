# session 12 call 2: new launch heuristics (bf16 pointwise XBLOCK 2048, looped RBLOCK 1024 w8, outer looped w16):
# sweep + bandwidth again, fp32 hf with addmm_bias_in_consumer, bf16 hf-full and timm-full for regressions
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 140 --json $OUT/sweep.json 2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel"
TRITON_INTERPRET=0 timeout 100 python3 benchmarks/gpu_bandwidth.py --hang-s 90 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log | grep -v Warn
BENCH_LIMIT=130 bash benchmarks/gpu_session.sh hf-full-fp32-addmm hf-full timm-full 2>&1 | grep -v "^│  \|^  warn"
cp .scratch/s12/call2.sh $OUT/
