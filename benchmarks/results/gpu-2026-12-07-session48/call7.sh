#!/usr/bin/env bash
# session 48, call 7 (the last 323 s): codegen-cpp 0.5.6 (one libmvec variant for every
# evaluation) on the GPU machine's CPU and Python 3.12: codegen-cpp's tests, the C++ end-to-end
# and numerics tests and the fuzz regression seeds (C++)
source benchmarks/gpu_env.sh
PYTEST="python3 -m pytest -q -p no:cacheprovider --import-mode=importlib"
lscpu | grep -E "Model name|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: ... \1 .../' | head -2
timeout 170 $PYTEST -n 14 --timeout 120 -k "not triton and not cuda" packages/codegen-cpp/tests \
  tests/test_codegen_cpp_e2e.py tests/test_numerics_regressions.py tests/test_special_values.py \
  tests/fuzz/test_fuzz.py 2>&1 | tee $OUT/tests-py312-cpp.log | grep -E "passed|failed|FAILED|Error" | tail -15
