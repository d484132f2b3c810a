#!/usr/bin/env bash
# One GPU-machine session (Python 3.12, torch 2.11, triton 3.6, no registry). Run through the device
# tool from the repo root with the bytecode wheel carried in .whl/ (see benchmarks/README.md):
#
#   bash benchmarks/gpu_session.sh                      # every section, in this order
#   bash benchmarks/gpu_session.sh py312 ops hf         # some of them
#   MODELS=bert,gpt2 bash benchmarks/gpu_session.sh hf-train   # some models of the bench sections
#   BENCH_LIMIT=200 bash benchmarks/gpu_session.sh timm-full     # a shorter limit per bench section
#
# Sections (each bounded, so one device call of 10 minutes at most gets the most out):
#   py312       the test suites on Python 3.12 (capture, guards, aot, loop-ir, cpp, meta-package,
#               end-to-end; codegen-triton's run for real in `smoke`)
#   ops         the op-level suite (every lowering, every dtype, odd sizes, strided and broadcast
#               inputs) through codegen-triton with real kernels on CUDA
#   cuda-tests  the CUDA-only end-to-end tests (masked attention, channels-last convolutions,
#               padded matrix multiplies, split reductions) with real kernels
#   smoke       codegen-triton's own tests and loop-ir's end-to-end tests on CUDA, launch overhead
#   zoo, hf     the benchmarks on CUDA in bfloat16 (kernel and ATen-fallback counts in the rows)
#   cudagraphs  the zoo and hf suites with mode="reduce-overhead" (CUDA graphs, both compilers);
#               cudagraphs-zoo / cudagraphs-hf for one of them
#   hf-full, timm-full   the full-size suites (--size full: bert-base, distilbert, gpt2, t5-base
#               encoder, an 8-layer Llama at batch 8-32 x 512-1024; timm at batch 64/128), inference
#   hf-full-fp32, timm-full-fp32   the same in float32 (6 rounds)
#   hf-b1-cudagraphs, timm-b1-cudagraphs   the full-size models at batch 1 with
#               mode="reduce-overhead" (CUDA graphs, both compilers)
#   hf-train, timm-train the same models for a training step (--train: bf16 autocast, loss,
#               backward, AdamW; gradients checked against eager)
#   bandwidth   gpu_bandwidth.py in bfloat16: GB/s of the memory-bound cases, eager vs torchkiln vs
#               torch.compile, with the queue kept full and for one call alone
#   bandwidth-profile the cases furthest from the bandwidth (training, vocabulary rows, batch-norm
#               statistics) with each compiler's kernels and their device time per call
#               (gpu_bandwidth.py --profile): which kernel of a case is slow
#   pool-bwd    ResNet-50's stem max-pool backward (gpu_bandwidth.py's max-pool cases, bf16 and fp32,
#               NCHW and NHWC, each compiler's kernels with --profile): ATen's kernel in eager
#               against loop-ir's gather; then the op table's pooling rows on CUDA
#   bandwidth-sweep   gpu_bandwidth_sweep.py: the same cases' torchkiln kernels under a grid of
#               launch configurations (the heuristic's figure, the best, the top six)
#   rounding    gpu_rounding_check.py: fused bfloat16/float16 chains against eager bit for bit
#               (a GPU compiler must not fuse a rounding away)
#   softmax-probe  gpu_softmax_probe.py: hand-written kernels that split a long-row softmax's time
#               into its online pass's instructions and its second read's L2 misses
#   direct-conv gpu_direct_conv.py: each depthwise and stem convolution shape of MobileNetV3,
#               EfficientNet-B0 and ConvNeXt-tiny at their batch sizes, cuDNN + activation against
#               loop-ir's direct convolution (bf16 and fp32): where LoopIROptions.direct_convolution_taps
#               should draw its line
#   bandwidth-persistent   the sweep of log_softmax over rows of 32768 generated persistent
#               (TritonOptions.persistent_rnumel 32768: one read of the row, 64 values a thread at 16
#               warps, 101 registers and no spill for sm_90 by triton_kernel_resources.py) against the
#               looped default's 62%
#   walked-whole   the softmax over rows of 50257 (bf16, fp16) in the default looped walk (the row
#               read twice), with its output stores evict_first (reread_stores_evict_first), and
#               TritonOptions.walked_rows_whole (one block a row, read once, edges from their own
#               block) at 16 and 32 warps, torchkiln alone, queue kept full
#   bn-stats    the channels-last batch-norm statistics (bf16): the default
#               (TritonOptions.transposed_min_programs 16: the combine of 128 partial rows in 16
#               programs) against 0 (4 programs), each kernel's time (--profile), then the full launch sweep of
#               its kernels (XBLOCK up to 256: whole 512-byte rows of channels)
#   outer-tiles the outer (transposed) reductions of gpu_bandwidth.py (column sum, channels-last
#               batch-norm statistics and backward sums, layer norm backward; bf16, torchkiln
#               alone) under four block shapes: transposed_min_programs 0, the default, XBLOCK 128
#               with a tile of 8192 at 32 values a thread, RBLOCK 16 at 4 (session 27: 46/62/60%
#               for the statistics, 88/62/49 for the backward sums)
#   kernel-ab   kernel choices, each against its off switch (torchkiln alone, queue kept full;
#               AB_CASES='case|TritonOptions|dtypes[|more args];...' replaces the list): the
#               channels-last batch-norm statistics in the Welford blocks (codegen-triton
#               0.9.18: 128 columns, 64 values a thread, 4 warps) and in the common ones
#               (transposed_welford_xblock 0); the NCHW statistics in bf16 with the next
#               iteration's loads in flight (loop_stages 2), split 4 ways (1024 programs) and
#               RBLOCK 4096 at 16 values a thread; GELU's backward and GELU + residual with
#               libdevice's erf and with erf_two_ranges (at the H100's bandwidth ceiling either
#               way in sessions 31-32; the H200 decides: 85% or more makes it the default)
#   erf-probe   gpu_erf_probe.py: GELU's backward (bf16, fp32, 128M values) with libdevice's erf,
#               an erf of two ranges with its coefficients inline, and that erf with ftz exps
#               (offline: 48.0 / 45.0 / 39.0 sm_90 instructions a value in bf16); each erf's
#               largest error in ulp
#   bn-probe    hand-written kernels for the same statistics (gpu_bn_stats_probe.py, bf16 then
#               fp32): chunks 64 / 128 / 512, six tile shapes, the next tile prefetched or not,
#               the shift per lane or per column; eager and torchkiln alongside. Which of a
#               program's fixed cost and its one-latency-an-iteration loop is the 47 us
#   timm-train-cudagraphs, hf-train-cudagraphs   timm-train, hf-train with mode="reduce-overhead"
#               (both compilers: torchkiln's step graphs, torch.compile's CUDA graph trees)
#   timm-train-never, hf-train-never   timm-train, hf-train without combo kernels (LoopIROptions.combo_kernels "never",
#               torch.compile not run): the other half of an A/B of combos on one machine
#   hf-full-fp32-addmm   hf-full-fp32 with LoopIROptions.addmm_bias_in_consumer (bench --options)
#   hf-full-padout, hf-full-fp32-padout   hf-full / hf-full-fp32 with
#               LoopIROptions.pad_matmul_outputs_only (the vocabulary head written into a padded
#               output, no per-call padded copy of its weight): peak memory and time against the default
#   kernel-limits  torchkiln's kernels against the H200's limits, per model (gpu_kernel_profile.py
#               --only torchkiln, hf then timm, MODELS / TASKS to narrow): each generated kernel's
#               achieved bandwidth from the debug dump's costs_<part>.json, the kernels furthest
#               from 4.3 TB/s first (ms above their floor), matmul and convolution TFLOP/s
#   bert-train-host   where BERT's training step spends its host time (gpu_kernel_profile.py
#               --host-profile, torchkiln only: cProfile of 5 steps and the host time of each ATen op);
#               train-host the same for HOST_SUITE (hf) / HOST_MODELS (bert), e.g. timm / resnet50
#   scale       BERT-base at full size (batch 16, seq 512, bf16 autocast): compile seconds and step
#               time for inference and a training step, eager vs torchkiln vs torch.compile
#               (benchmarks/gpu_scale.py; one subprocess per compiler and mode)
#   fuzz        FUZZ_N fuzzed programs (default 10000) from seed FUZZ_SEED (default 100000), split over
#               FUZZ_JOBS parallel children (default 15, `run.py --jobs`) on the host's CPU cores, C++
#               codegen (Triton's interpreter does not run with this machine's numpy); the summary
#               in $OUT/fuzz.log and $OUT/fuzz.json (FUZZ_LIMIT seconds at most: a stopped run
#               still prints what it saw)
# Everything lands in $OUT.
set -uo pipefail
# shellcheck source=benchmarks/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
python3 -c 'import sys, torch, triton; print(sys.version); print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
PYTEST="python3 -m pytest -q -p no:cacheprovider --import-mode=importlib"

bench() {  # bench <name> <timeout> <args...>
  local name=$1 limit=${BENCH_LIMIT:-$2}
  shift 2
  timeout -s ABRT -k 10 "$limit" python3 -m torchkiln bench --device cuda --dtype bfloat16 --no-progress \
    ${MODELS:+--models "$MODELS"} --json "$OUT/gpu-$name.json" "$@" 2>&1 | tee "$OUT/gpu-$name.log" | tail -16
}

for section in ${@:-py312 ops smoke zoo hf cudagraphs}; do
  echo "=== $section"
  case $section in
    # Triton's interpreter (3.6 here) fails looped reductions with this machine's numpy 2.5, so
    # no test runs Triton interpreted here: the Triton cases run for real on CUDA in `ops`,
    # `cuda-tests` and `smoke`. -v names each result as it comes, so a run cut by the limit
    # still says which tests failed (session 9's, cut at 98%, printed dots only).
    # A test module that runs Triton interpreted sets TRITON_INTERPRET=1 when imported, in every
    # worker that collects it, so the CUDA tests are left to `cuda-tests` (session 17's py312
    # ran six of them through the interpreter: they failed there, and passed with real kernels).
    # Session 32: four tests ran Triton interpreted under names without "triton" (the mixed-order
    # layer norm, three fuzz seeds that draw the Triton backend) and failed for the interpreter
    # Session 37: the combo kernels' CPU cases (Triton 3.6's interpreter refuses a @triton.jit
    # function calling another: "Cannot call @triton.jit'd outside of the scope of a kernel";
    # CI's Triton 3.9 runs them, and `cuda-tests` runs them with real kernels); session 38: the
    # pooling seed 31292, the layout seed 54522 (session 39) and the pooling seed 33361 (session
    # 40), Triton programs whose combo kernels that interpreter refused the same way
    py312) timeout ${PY312_LIMIT:-300} $PYTEST -v -n 14 --timeout 120 \
             -k "not triton and not cuda and not split_statistics and not mixed_order and not found-180 and not found-4215 and not found-4414 and not found-31292 and not found-54522 and not found-33361 and not combo" \
             $(ls -d packages/*/tests | grep -v codegen-triton) tests 2>&1 \
             | tee "$OUT/tests-py312.log" | grep -E "passed|failed|FAILED|Error" | tail -40 ;;
    ops) TRITON_INTERPRET=0 PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" timeout 200 $PYTEST -n 12 \
           --timeout 180 -p cuda_default_plugin tests/test_ops_codegen.py -k triton 2>&1 \
           | tee "$OUT/ops-triton-cuda.log" | tail -15 ;;
    cuda-tests) { TRITON_INTERPRET=0 timeout ${CUDA_TESTS_LIMIT:-100} $PYTEST -n 4 --timeout 90 \
                    tests/test_masked_attention_cuda.py tests/test_channels_last_e2e.py \
                    tests/test_pad_mm_e2e.py tests/test_recurrent_e2e.py \
                    tests/test_combo_kernels_e2e.py 2>&1
                  TRITON_INTERPRET=0 timeout 100 $PYTEST -n 4 --timeout 90 \
                    tests/test_direct_convolution_e2e.py -k cuda 2>&1
                  TRITON_INTERPRET=0 PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" timeout 100 $PYTEST \
                    -n 4 --timeout 90 -p cuda_default_plugin tests/test_codegen_triton_e2e.py 2>&1
                } | tee "$OUT/tests-cuda.log" | grep -E "passed|failed|FAILED|Error" | tail -20 ;;
    # the whole of codegen-triton's suite and loop-ir's end-to-end tests: 196 s in session 18
    smoke) timeout ${SMOKE_LIMIT:-240} python3 benchmarks/gpu_triton_smoke.py 2>&1 \
             | tee "$OUT/triton-smoke.log" | tail -2 ;;
    zoo) bench zoo-bf16 140 --suite zoo ;;
    hf) bench hf-bf16 120 --suite hf ;;
    cudagraphs) bench zoo-bf16-cudagraphs 150 --suite zoo --mode reduce-overhead
                bench hf-bf16-cudagraphs 130 --suite hf --mode reduce-overhead ;;
    cudagraphs-zoo) bench zoo-bf16-cudagraphs 150 --suite zoo --mode reduce-overhead ;;
    cudagraphs-hf) bench hf-bf16-cudagraphs 130 --suite hf --mode reduce-overhead ;;
    hf-full) bench hf-full-bf16 560 --suite hf --size full --repeat 10 ;;
    timm-full) bench timm-full-bf16 560 --suite timm --size full --repeat 10 ;;
    hf-full-fp32) bench hf-full-fp32 560 --suite hf --size full --dtype float32 --repeat 6 ;;
    timm-full-fp32) bench timm-full-fp32 560 --suite timm --size full --dtype float32 --repeat 6 ;;
    hf-b1-cudagraphs) bench hf-full-b1-bf16-cudagraphs 560 --suite hf --size full --batch 1 \
                        --mode reduce-overhead --repeat 10 ;;
    timm-b1-cudagraphs) bench timm-full-b1-bf16-cudagraphs 560 --suite timm --size full --batch 1 \
                          --mode reduce-overhead --repeat 10 ;;
    hf-train) bench hf-full-train-bf16 560 --suite hf --size full --train --repeat 5 --warmup 2 ;;
    timm-train) bench timm-full-train-bf16 560 --suite timm --size full --train --repeat 5 --warmup 2 ;;
    timm-train-cudagraphs) bench timm-full-train-bf16-cudagraphs 560 --suite timm --size full \
                             --train --mode reduce-overhead --repeat 5 --warmup 3 ;;
    hf-train-cudagraphs) bench hf-full-train-bf16-cudagraphs 560 --suite hf --size full \
                           --train --mode reduce-overhead --repeat 5 --warmup 3 ;;
    hf-train-never) bench hf-full-train-bf16-never 560 --suite hf --size full --train \
                      --repeat 5 --warmup 2 --no-peer --options '{"loop_ir": {"combo_kernels": "never"}}' ;;
    timm-train-never) bench timm-full-train-bf16-never 560 --suite timm --size full --train \
                        --repeat 5 --warmup 2 --no-peer --options '{"loop_ir": {"combo_kernels": "never"}}' ;;
    hf-full-fp32-addmm) bench hf-full-fp32-addmm 560 --suite hf --size full --dtype float32 \
                          --repeat 6 --options '{"loop_ir": {"addmm_bias_in_consumer": true}}' ;;
    hf-full-padout) bench hf-full-bf16-padout 560 --suite hf --size full --repeat 10 \
                      --options '{"loop_ir": {"pad_matmul_outputs_only": true}}' ;;
    hf-full-fp32-padout) bench hf-full-fp32-padout 560 --suite hf --size full --dtype float32 \
                           --repeat 6 --options '{"loop_ir": {"pad_matmul_outputs_only": true}}' ;;
    kernel-limits) for suite_models in "hf:${MODELS:-bert,distilbert,gpt2,t5_encoder,llama}" \
                       "timm:${TIMM_MODELS:-resnet50,mobilenetv3_large_100,vit_base_patch16_224,convnext_tiny,efficientnet_b0}"; do
                     TRITON_INTERPRET=0 timeout ${LIMITS_LIMIT:-280} python3 benchmarks/gpu_kernel_profile.py \
                       --hang-s $(( ${LIMITS_LIMIT:-280} - 5 )) --suite "${suite_models%%:*}" --models "${suite_models#*:}" \
                       --tasks "${TASKS:-train}" --only torchkiln --no-tar --out "$OUT/limits" 2>&1 \
                       | tee -a "$OUT/limits.log" | awk '/^=====/ {print} /against the H200/ {n = 17} n && n--'
                   done ;;
    bert-train-host|train-host) suite=${HOST_SUITE:-hf} model=${HOST_MODELS:-bert}
                     TRITON_INTERPRET=0 timeout ${HOST_LIMIT:-120} python3 benchmarks/gpu_kernel_profile.py \
                       --hang-s $(( ${HOST_LIMIT:-120} - 5 )) --suite "$suite" --models "$model" --tasks train --only torchkiln \
                       --host-profile --out "$OUT/$model-train-host" 2>&1 | grep -v "^  " | tail -8
                     head -${HOST_LINES:-90} "$OUT/$model-train-host/host-$suite.txt" ;;
    bandwidth) TRITON_INTERPRET=0 timeout ${BANDWIDTH_LIMIT:-150} python3 benchmarks/gpu_bandwidth.py \
                 --hang-s 140 --dtypes bfloat16 --json "$OUT/bandwidth.json" 2>&1 \
                 | tee "$OUT/bandwidth.log" | tail -16 ;;
    pool-bwd) TRITON_INTERPRET=0 timeout ${BANDWIDTH_LIMIT:-150} python3 benchmarks/gpu_bandwidth.py \
                --hang-s 140 --dtypes bfloat16,float32 --profile --cases max-pool \
                --json "$OUT/pool-bwd.json" 2>&1 | tee "$OUT/pool-bwd.log" | grep -v "Warn\|warn\|USDT\|^$" | tail -40
              TRITON_INTERPRET=0 PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" timeout 150 $PYTEST -n 4 \
                --timeout 120 -p cuda_default_plugin tests/test_ops_codegen.py -k "triton and pool" 2>&1 \
                | tee "$OUT/pool-bwd-tests.log" | tail -3 ;;
    bandwidth-profile) TRITON_INTERPRET=0 timeout ${BANDWIDTH_LIMIT:-150} python3 benchmarks/gpu_bandwidth.py \
                 --hang-s 140 --dtypes bfloat16 --profile --json "$OUT/bandwidth-profile.json" \
                 --cases "backward,rows of,32768,cross-entropy,bn " 2>&1 \
                 | tee "$OUT/bandwidth-profile.log" | grep -v "Warn\|warn\|USDT\|^$" | tail -60 ;;
    rounding) TRITON_INTERPRET=0 timeout ${ROUNDING_LIMIT:-120} python3 benchmarks/gpu_rounding_check.py \
                --hang-s 110 --json "$OUT/rounding.json" 2>&1 | tee "$OUT/rounding.log" | grep -v "Warn\|warn" ;;
    softmax-probe) TRITON_INTERPRET=0 timeout ${PROBE_LIMIT:-200} python3 benchmarks/gpu_softmax_probe.py \
                     --hang-s 190 --json "$OUT/softmax-probe.json" 2>&1 | tee "$OUT/softmax-probe.log" ;;
    direct-conv) TRITON_INTERPRET=0 timeout ${DIRECT_LIMIT:-210} python3 benchmarks/gpu_direct_conv.py \
                   --hang-s 205 --json "$OUT/direct-conv.json" 2>&1 | tee "$OUT/direct-conv.log" \
                   | grep -v "Warn\|warn\|^$" ;;
    bandwidth-persistent) TRITON_INTERPRET=0 timeout ${SWEEP_LIMIT:-120} python3 \
                       benchmarks/gpu_bandwidth_sweep.py --hang-s 110 --cases "log_softmax (32768)" \
                       --options '{"persistent_rnumel": 32768}' --json "$OUT/sweep-persistent.json" \
                       2>&1 | tee "$OUT/sweep-persistent.log" | grep -v "^   X" ;;
    walked-whole) for opts in '{}' '{"reread_stores_evict_first": true}' \
                         '{"walked_rows_whole": 65536}' \
                         '{"walked_rows_whole": 65536, "walked_rows_whole_warps": 32}'; do
                       echo "== TritonOptions $opts"
                       TRITON_INTERPRET=0 timeout 150 python3 benchmarks/gpu_bandwidth.py --hang-s 140 \
                         --dtypes bfloat16,float16,float32 --cases "rows of 50257" --compilers torchkiln \
                         --triton-options "$opts" 2>&1 | grep -v "Warn\|warn" | tail -8
                     done ;;
    bn-stats) for opts in '{"transposed_min_programs": 0}' '{}'; do
                 echo "== TritonOptions $opts"
                 TRITON_INTERPRET=0 timeout 120 python3 benchmarks/gpu_bandwidth.py --hang-s 110 \
                   --dtypes bfloat16 --cases "bn stats nhwc,bn bwd sums nhwc" --profile \
                   --triton-options "$opts" 2>&1 | grep -v "Warn\|warn" | tail -16
               done
               TRITON_INTERPRET=0 timeout ${SWEEP_LIMIT:-150} python3 benchmarks/gpu_bandwidth_sweep.py \
                 --hang-s 140 --dtypes bfloat16 --cases "bn stats nhwc" --json "$OUT/sweep-bn.json" \
                 2>&1 | tee "$OUT/sweep-bn.log" | grep -v "^   X" | tail -20 ;;
    outer-tiles) for opts in '{"transposed_min_programs": 0}' '{}' \
                   '{"transposed_xblock": 128, "transposed_tile": 8192, "transposed_values_per_thread": 32}' \
                   '{"transposed_rblock": 16, "transposed_values_per_thread": 4}'; do
                   echo "== TritonOptions $opts"
                   TRITON_INTERPRET=0 timeout 60 python3 benchmarks/gpu_bandwidth.py --hang-s 55 \
                     --dtypes bfloat16 --cases "column sum,bn stats nhwc,bn bwd sums nhwc,layer norm backward" \
                     --compilers torchkiln --triton-options "$opts" 2>&1 | grep -v "Warn\|warn\|each cell" | tail -6
                 done ;;
    kernel-ab) ab_list=('bn stats|{}|bfloat16,float32'
                   'bn stats nhwc|{"transposed_welford_xblock": 0}|bfloat16,float32'
                   'bn stats nchw|{"loop_stages": 2}|bfloat16'
                   'bn stats nchw|{}|bfloat16|--split-programs 1056'
                   'bn stats nchw|{"looped_rblock": 4096, "looped_values_per_thread": 16}|bfloat16'
                   'gelu|{}|bfloat16,float32' 'gelu|{"erf_two_ranges": true}|bfloat16,float32')
               # AB_CASES='case|opts|dtypes[|args];...' replaces the list
               [[ -n "${AB_CASES:-}" ]] && IFS=';' read -r -a ab_list <<< "$AB_CASES"
               for case_opts in "${ab_list[@]}"; do
                 IFS='|' read -r ab_case ab_opts ab_dtypes ab_more <<< "$case_opts"
                 echo "== $ab_case ($ab_dtypes): TritonOptions $ab_opts $ab_more"
                 TRITON_INTERPRET=0 timeout ${AB_LIMIT:-45} python3 benchmarks/gpu_bandwidth.py \
                   --hang-s $(( ${AB_LIMIT:-45} - 3 )) --dtypes "$ab_dtypes" --cases "$ab_case" \
                   --compilers torchkiln --triton-options "$ab_opts" $ab_more 2>&1 \
                   | tee -a "$OUT/kernel-ab.log" | grep -v "Warn\|warn\|each cell" | tail -6
               done ;;
    erf-probe) TRITON_INTERPRET=0 PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" timeout ${PROBE_LIMIT:-100} \
                 python3 benchmarks/gpu_erf_probe.py --hang-s 95 --json "$OUT/erf-probe.json" 2>&1 \
                 | grep -v "Warn\|warn" | tee "$OUT/erf-probe.log" ;;
    bn-probe) for dt in bfloat16 float32; do
                TRITON_INTERPRET=0 timeout ${PROBE_LIMIT:-100} python3 benchmarks/gpu_bn_stats_probe.py \
                  --hang-s 95 --dtype $dt --json "$OUT/bn-probe-$dt.json" 2>&1 \
                  | grep -v "Warn\|warn" | tee "$OUT/bn-probe-$dt.log"
              done ;;
    bandwidth-sweep) TRITON_INTERPRET=0 timeout ${SWEEP_LIMIT:-240} python3 \
                       benchmarks/gpu_bandwidth_sweep.py --hang-s 230 --json "$OUT/sweep.json" \
                       --sources "$OUT/sweep-sources.py" 2>&1 | tee "$OUT/sweep.log" | grep -v "^   X" ;;
    scale) timeout 560 python3 benchmarks/gpu_scale.py --model bert-base --batch 16 --seq 512 \
             --timeout 170 --json "$OUT/gpu-scale-bert-base.json" 2>&1 | tee "$OUT/gpu-scale.log" | tail -12 ;;
    scale-infer) timeout 560 python3 benchmarks/gpu_scale.py --model bert-base --modes infer \
             --timeout 170 --json "$OUT/gpu-scale-bert-base-infer.json" 2>&1 | tail -8 ;;
    fuzz) timeout ${FUZZ_LIMIT:-520} python3 tests/fuzz/run.py --programs ${FUZZ_N:-10000} \
            --seed ${FUZZ_SEED:-100000} --jobs ${FUZZ_JOBS:-15} --triton-share 0 \
            --json "$OUT/fuzz.json" > "$OUT/fuzz.log" 2>&1
          tail -24 "$OUT/fuzz.log" ;;
    *) echo "unknown section $section" ;;
  esac
done
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("gpu-*.json")):
    for r in json.loads(f.read_text())["rows"]:
        print(f"{f.stem} {r['suite']}/{r['model']}: graphs {r['graphs']} kernels {r['kernels']} "
              f"aten fallbacks {r.get('op_fallbacks')} accuracy {r['accuracy']}")
PY
