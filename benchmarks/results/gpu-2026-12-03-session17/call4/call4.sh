# session 17 call 4: f8997c6 + the capture fixes (identity of nested functions, code_signature, bound-method
# __func__/__self__; .scratch/s16/capture-fixes.patch + tests/test_dispatch_wrappers.py): the suites on Python 3.12
set -o pipefail
cp .scratch/s17/call4.sh $OUT/
git diff HEAD --stat > $OUT/diff-stat.txt 2>&1
PY312_LIMIT=420 bash benchmarks/gpu_session.sh py312 2>&1 | tail -25
