# session 19 call 4 (fresh machine): codegen-triton 0.9.7 (grouped online softmax; RBLOCK 16384
# at 32 warps for vector rows of 32768+ read twice): every bandwidth case in bf16, the
# softmax-type cases in fp32, the sweep of log_softmax over 32768 in both, the biased softmax's
# GPU difference from eager, then codegen-triton's online, aligned and config tests on CUDA
set -o pipefail
cp .scratch/s19/call4.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0
OUT=$OUT BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | tail -16
echo "=== fp32"; timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 --cases rows,32768,cross-entropy --dtypes float32 --json $OUT/bandwidth-fp32.json 2>&1 | grep -v "^case\|^each" | tail -4
timeout 70 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 65 --json $OUT/sweep.json \
  --cases "log_softmax (32768)" --dtypes bfloat16,float32 2>&1 | tee $OUT/sweep.log | grep -v "^   X" | grep "==\|kernel\|top"
echo "=== diag3"; timeout 60 python3 .scratch/s19/diag3.py 2>&1 | tee $OUT/diag3.log | grep -v "^ \|^def\|^$" | head -12
timeout 170 python3 benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_online_softmax.py packages/codegen-triton/tests/test_aligned_rows.py packages/codegen-triton/tests/test_reduction_config.py 2>&1 | tee $OUT/triton-smoke.log | grep -v "^PASS" | tail -8
