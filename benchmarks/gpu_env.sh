# Sourced by every script a device call runs (gpu_session.sh, a session's call scripts): $OUT
# (what comes back), the carried wheels of .whl/ in /tmp/site, the packages' sources on
# PYTHONPATH, a private code cache, and $OUT/commit.txt (the machine copy's last commit, which
# may be older than the working tree it ran, and the card)
OUT=${OUT:-/tmp/out}
export OUT
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC"
# a bench cut by its limit gets SIGABRT (timeout -s ABRT): faulthandler prints where it hung
export TORCHKILN_CACHE_DIR=/tmp/tk-cache PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
{ git log --oneline -1 2>/dev/null; nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null; } > "$OUT/commit.txt"
