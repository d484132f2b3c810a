# session 15 call 1 (code of 92ead40): Python 3.12 suites for dynamo-capture 0.9.5, bandwidth of codegen-triton 0.9.2's
# rewritten online softmax / Welford loops, the persistent log_softmax sweep, timm fp32 full size, timm batch 1 CUDA graphs
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s15/call1.sh $OUT/
PYTEST="python3 -m pytest -q -p no:cacheprovider --import-mode=importlib"
timeout 110 $PYTEST -n 14 --timeout 100 -k "not triton" packages/dynamo-capture/tests packages/guards/tests packages/aot-partition/tests tests/test_autograd_function_e2e.py tests/test_hf_one_graph_e2e.py 2>&1 | tee $OUT/tests-py312.log | grep -E "passed|failed|FAILED|Error" | tail -15
TRITON_INTERPRET=0 timeout 95 python3 benchmarks/gpu_bandwidth.py --hang-s 90 --dtypes bfloat16 --json $OUT/bandwidth.json 2>&1 | tee $OUT/bandwidth.log | grep -v "Warn\|warn\|Online\|split the\|important\|softmax\.$\|^$" | tail -30
SWEEP_LIMIT=65 bash benchmarks/gpu_session.sh bandwidth-persistent 2>&1 | tail -12
BENCH_LIMIT=150 bash benchmarks/gpu_session.sh timm-full-fp32 2>&1 | tail -10
BENCH_LIMIT=130 bash benchmarks/gpu_session.sh timm-b1-cudagraphs 2>&1 | tail -10
