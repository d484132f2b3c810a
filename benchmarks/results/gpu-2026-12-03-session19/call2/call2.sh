# session 19 call 2: codegen-triton with the grouped online softmax (online_group 8): the GPU
# failure's diagnosis, every bandwidth case, the per-value form beside it on the cases it touches
# (bf16 and fp32), the sweep of the softmax-type cases, the online and aligned tests on CUDA
set -o pipefail
cp .scratch/s19/call2.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0
echo "=== diag"; timeout 100 python3 .scratch/s19/diag_biased.py 2>&1 | tee $OUT/diag.log | tail -25
OUT=$OUT BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | tail -20
V="timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --compilers torchkiln --cases rows,32768,cross-entropy"
echo "=== per value, bf16"; $V --dtypes bfloat16 --triton-options '{"online_group": 1}' --json $OUT/v-pervalue-bf16.json 2>&1 | grep -v "^case\|^each" | tail -4
echo "=== grouped, fp32"; $V --dtypes float32 --json $OUT/v-grouped-fp32.json 2>&1 | grep -v "^case\|^each" | tail -4
echo "=== per value, fp32"; $V --dtypes float32 --triton-options '{"online_group": 1}' --json $OUT/v-pervalue-fp32.json 2>&1 | grep -v "^case\|^each" | tail -4
timeout 130 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 125 --json $OUT/sweep.json \
  --cases "softmax (rows of 50257),log_softmax (32768),cross-entropy (50257)" \
  2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel\|top"
timeout 100 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_online_softmax.py packages/codegen-triton/tests/test_aligned_rows.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -8
