"""L2 eviction hints for a looped reduction kernel that reads a row more than once.

A looped softmax reads each row twice: once for its max and sum of exp (one r-loop with the
online softmax, ``_online.py``), once more to write the result. Whether the second read comes
from the L2 cache or from DRAM decides the kernel's speed: from DRAM, the kernel moves three
bytes for every two it must, at most two thirds of the bandwidth. What lies between a row's two
reads is every other row that the device's resident programs walk meanwhile: an H200 keeps
about a thousand such programs resident, and a thousand rows of 32768 bfloat16 values (64 KB)
are 64 MB, more than its 50 MB of L2, so with plain loads most second reads miss.

Triton's loads take an eviction policy. Here a load of a buffer that a later r-loop of the same
kernel reads again is ``evict_last`` (kept in L2 before other lines), and that later loop's
load of it, its last read, is ``evict_first`` (its line is the first to go once read). Loads
of buffers read in one r-loop only, persistent kernels (one read of the row) and split
reductions keep the default policy. The hints never change a result.

``TritonOptions.eviction_hints`` turns them off, for comparison. With
``TritonOptions.reread_stores_evict_first`` the stores of the last r-loop that reads a row
again are ``evict_first`` as well (``store_policy``): the output written through L2 leaves it
before the rows still waiting for their second read.
"""

from __future__ import annotations

from torchkiln_loop_ir.backend import KernelSpec

from ._layout import memory_accesses

#: the policy of a load that a later r-loop repeats, and of that repeat when it is the last
KEEP, LAST_READ = "evict_last", "evict_first"


def reread_plan(
    spec: KernelSpec, *, looped: bool, split: bool, absorbed: int | None, enabled: bool
) -> dict[str, int]:
    """Buffer -> the index of the last stage whose r-loop loads it, for each buffer loaded in
    two or more of ``spec``'s r-loops (stage ``absorbed``, whose loop the online softmax
    dropped, does not count). Empty when the hints do not apply (see the module docstring)."""
    if not (enabled and looped and not split and spec.rranges):
        return {}
    seen: dict[str, list[int]] = {}
    for i, stage in enumerate(spec.stages):
        if stage.kind != "loop" or i == absorbed:
            continue
        loads = memory_accesses(spec, stage_index=i, loads_only=True)
        if loads is None:
            return {}  # a body the recorder cannot replay: no hints (the generator reports)
        for name in {name for name, _ in loads}:
            seen.setdefault(name, []).append(i)
    return {name: stages[-1] for name, stages in seen.items() if len(stages) > 1}


def policy(plan: dict[str, int], name: str, stage_index: int) -> str | None:
    """The eviction policy of a load of ``name`` in the r-loop of stage ``stage_index``."""
    last = plan.get(name)
    if last is None:
        return None
    return LAST_READ if stage_index >= last else KEEP


def store_policy(plan: dict[str, int], stage_index: int, enabled: bool) -> str | None:
    """The eviction policy of a store in the r-loop of stage ``stage_index``: ``evict_first``
    in the last r-loop that reads a buffer again when ``enabled``, else None."""
    if not (enabled and plan) or stage_index < max(plan.values()):
        return None
    return LAST_READ
