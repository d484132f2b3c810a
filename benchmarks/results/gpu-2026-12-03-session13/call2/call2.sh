# session 13 call 2: input-free causal masks -> is_causal (aot-partition 0.8.0), power-of-two warps (codegen-triton 0.9.1):
# hf-full bf16 and fp32, bandwidth
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s13/call2.sh $OUT/
python3 -c "import transformers, timm; print('transformers', transformers.__version__, 'timm', timm.__version__)"
BENCH_LIMIT=215 bash benchmarks/gpu_session.sh hf-full 2>&1 | tail -12
BENCH_LIMIT=215 bash benchmarks/gpu_session.sh hf-full-fp32 2>&1 | tail -12
TRITON_INTERPRET=0 timeout 75 python3 benchmarks/gpu_bandwidth.py --hang-s 70 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log | grep -v "Warn\|warn\|Online\|split the\|important\|softmax\.$\|^$"
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/out*/gpu-*.json") + glob.glob(__import__("os").environ["OUT"] + "/gpu-*.json")):
    for r in json.load(open(f))["rows"]:
        print(f.split("/")[-1], r["model"], r.get("attention"))
PY
