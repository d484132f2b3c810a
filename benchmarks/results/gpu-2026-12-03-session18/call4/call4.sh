# session 18 call 4 (fresh machine): codegen-triton 0.9.6 (eviction hints + vector rows at twice
# the block): every bandwidth case, variants of torchkiln's options alone on the cases they touch,
# the sweep of looped rows of 16384 in bf16 and fp32 (does the vector rule pick the best?), then
# codegen-triton's tests on CUDA
set -o pipefail
cp .scratch/s18/call4.sh $OUT/
git log --oneline -1 > $OUT/commit.txt; git diff HEAD --stat >> $OUT/commit.txt 2>&1
BANDWIDTH_LIMIT=150 bash benchmarks/gpu_session.sh bandwidth 2>&1 | tail -20
export PYTHONPATH="/tmp/site:$(ls -d "$PWD"/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache TRITON_INTERPRET=0
V="timeout 40 python3 benchmarks/gpu_bandwidth.py --hang-s 36 --dtypes bfloat16 --compilers torchkiln"
echo "=== no eviction hints"; $V --cases "rows of,32768,layer norm" --triton-options '{"eviction_hints": false}' --json $OUT/v-noevict.json 2>&1 | grep -v "^case\|^each" | tail -5
echo "=== vector scale 1"; $V --cases "32768" --triton-options '{"looped_vector_scale": 1}' --json $OUT/v-scale1.json 2>&1 | grep -v "^case\|^each" | tail -3
echo "=== transposed 32 per thread"; $V --cases "bn stats,bn bwd,column sum,layer norm backward" --triton-options '{"transposed_values_per_thread": 32}' --json $OUT/v-t32.json 2>&1 | grep -v "^case\|^each" | tail -7
echo "=== split programs 4096"; $V --cases "bn stats,bn bwd" --split-programs 4096 --json $OUT/v-split4096.json 2>&1 | grep -v "^case\|^each" | tail -5
timeout 130 python3 benchmarks/gpu_bandwidth_sweep.py --hang-s 125 --json $OUT/sweep16384.json \
  --width 16384 --rows 16384 --dtypes bfloat16,float32 --cases "softmax (last dim),layer norm,row sum" \
  2>&1 | tee $OUT/sweep16384.log | grep -v "^   X" | grep "==\|kernel\|top"
timeout 80 python3 benchmarks/gpu_triton_smoke.py 2>&1 | tee $OUT/triton-smoke.log | tail -3
