# session 13 call 4: llama training (cut from call 3), where BERT's training step goes (kernel profile, wall in rounds),
# batch 1 with CUDA graphs on the hf models
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:)" TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1
cp .scratch/s13/call4.sh $OUT/
MODELS=llama BENCH_LIMIT=75 bash benchmarks/gpu_session.sh hf-train 2>&1 | tail -4
TRITON_INTERPRET=0 timeout 85 python3 benchmarks/gpu_kernel_profile.py --hang-s 80 --suite hf --models bert --tasks train --out $OUT/prof 2>&1 | grep -v "^  " | tail -14
BENCH_LIMIT=110 bash benchmarks/gpu_session.sh hf-b1-cudagraphs 2>&1 | tail -8
