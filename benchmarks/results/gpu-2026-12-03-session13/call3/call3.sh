# session 13 call 3: float32 masked attention rerouted (T5), CUDA tests of both attention changes, Python 3.12 capture/guards/aot
# suites, hf-full-fp32 for t5_encoder, hf-train bf16
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s13/call3.sh $OUT/
PYTEST="python3 -m pytest -q -p no:cacheprovider --import-mode=importlib"
TRITON_INTERPRET=0 timeout 110 $PYTEST -n 6 --timeout 100 tests/test_masked_attention_cuda.py tests/test_sdpa_masks_e2e.py 2>&1 | tee $OUT/tests-cuda-attention.log | tail -4
timeout 120 $PYTEST -n 14 --timeout 100 -k "not triton" packages/dynamo-capture/tests packages/guards/tests packages/aot-partition/tests 2>&1 | tee $OUT/tests-py312.log | grep -E "passed|failed|FAILED|Error" | tail -15
MODELS=t5_encoder BENCH_LIMIT=100 bash benchmarks/gpu_session.sh hf-full-fp32 2>&1 | tail -5
BENCH_LIMIT=215 bash benchmarks/gpu_session.sh hf-train 2>&1 | tail -14
