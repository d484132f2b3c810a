"""Sum the summaries of several `tests/fuzz/run.py` logs (one per parallel run over disjoint
seeds) into one: counts per kind, the failing seeds, the fallback reasons.

    python benchmarks/fuzz_sum.py out/fuzz-*.log
"""

from __future__ import annotations

import collections
import re
import sys


def main(paths: list[str]) -> int:
    counts: collections.Counter[str] = collections.Counter()
    seeds: dict[str, list[str]] = collections.defaultdict(list)
    reasons: collections.Counter[str] = collections.Counter()
    ranges, unfinished = [], []
    for path in paths:
        text = open(path).read()
        head = re.search(r"^(\d+) programs, seeds (\d+)\.\.(\d+)", text, re.M)
        if head is None:
            unfinished.append(path)
            continue
        ranges.append((int(head[2]), int(head[3])))
        for kind, n in re.findall(r"^  (\S+)\s+(\d+)  \(", text, re.M):
            counts[kind] += int(n)
        for kind, s in re.findall(r"^  (\S+) seeds: (.*)$", text, re.M):
            seeds[kind] += s.split()
        for n, r in re.findall(r"^    +(\d+)  (.*)$", text, re.M):
            reasons[r] += int(n)
    total = counts["ok"] + sum(counts[k] for k in ("wrong", "no-error", "crash", "unstable", "undefined", "harness"))
    ranges.sort()
    print(f"{total} programs in {len(ranges)} runs, seeds {ranges[0][0] if ranges else '-'}.."
          f"{ranges[-1][1] if ranges else '-'}")
    for kind in ("ok", "wrong", "no-error", "crash", "unstable", "undefined", "fallback", "error-replay",
                 "op-fallback", "harness"):
        print(f"  {kind:12s} {counts[kind]:6d}  ({100 * counts[kind] / max(total, 1):.2f}%)")
    for kind, s in seeds.items():
        print(f"  {kind} seeds: {' '.join(s)}")
    for r, n in reasons.most_common(15):
        print(f"    {n:5d}  {r}")
    for path in unfinished:
        print(f"  NOT FINISHED: {path}")
    return 1 if unfinished or counts["wrong"] or counts["crash"] or counts["no-error"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
