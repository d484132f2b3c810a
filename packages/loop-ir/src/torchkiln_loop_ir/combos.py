"""Combo kernels: independent small pointwise kernels launched as one.

A bfloat16 training step is full of kernels too small to fill a GPU: autocast's cast of each
parameter in the forward, of each weight gradient at the end of the backward, each batch norm's
``num_batches_tracked += 1``. ConvNeXt-tiny's forward launched 108 such casts among its 175
kernels; each costs the host 6-8 us to launch and the GPU a few us to run, whatever its size.
Fusing them into one loop nest is not possible (their ranges differ, they share no buffer). A
combo kernel keeps each member's own loop nest and its own blocks: the launch's programs are the
members' programs one after another, and each program runs the member its id falls in
(``KernelSpec.combo``; the code generator writes the dispatch). One launch instead of many, and
no member loses parallelism.

``combine_kernels(steps, buffers, max_members)`` picks the members on the final order of steps,
before buffers are planned:

- a member is a pointwise kernel (no reduction, not mixed-order) of static sizes, at most
  ``MAX_NUMEL`` elements, that neither updates a buffer in place, nor stores with atomics, nor
  checks a computed index (an index out of range must raise where eager's does);
- it may run anywhere between the last step writing what it reads (``earliest``) and the first
  step using what it writes or writing what it reads (``latest``); a member reading what another
  member writes is not one (its window would be measured from a step that moves);
- windows are stabbed greedily, in order of their latest slot: each group runs at the latest
  slot of its first member, with every other member whose window holds that slot, up to
  ``max_members``. Moving a kernel earlier keeps its outputs alive from its new slot to its old
  place, moving it later its inputs: a kernel joins a group only while what moved kernels hold
  beyond the original schedule stays within ``MAX_BYTES`` at every step, so the peak grows by
  at most that (autocast's bfloat16 copies of all of GPT-2's weights, hoisted to the start of
  an inference graph, would be 248 MB). Buffers alive through the whole graph anyway (its
  inputs, its outputs: the casts a training forward saves for the backward) cost nothing.
  A group of one stays where it was.

The rest of the steps keep their order. Memory planning then sees a combo as one kernel reading
all its members' inputs and writing all their outputs, so no member's output is written over
another member's input.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import sympy
import torch

from .backend import BufferSpec, ExternCall, KernelSpec, View
from .costs import _numel
from .memory import _nbytes, step_uses

#: the most elements a member computes: beyond, a kernel fills the GPU alone and its launch is
#: a small part of its time (ConvNeXt-tiny's largest parameter, a 768 x 3072 linear weight, has
#: 2.4M)
MAX_NUMEL = 1 << 22

#: the most bytes that moving kernels may add to what is alive at any step (see the module's
#: docstring)
MAX_BYTES = 64 << 20


def combine_kernels(
    steps: Sequence[Any],
    buffers: Mapping[str, BufferSpec],
    max_members: int,
    *,
    alive: Collection[str] = (),
    max_numel: int = MAX_NUMEL,
    max_bytes: int = MAX_BYTES,
) -> list[Any]:
    """``steps`` with groups of independent small pointwise kernels replaced by combo kernels
    (``KernelSpec.combo``) of at most ``max_members`` each (see the module's docstring).
    ``alive``: buffers alive through the whole graph anyway (its inputs and outputs: a
    training forward's saved values), which moving a kernel never keeps alive longer."""
    if max_members < 2:
        return list(steps)
    root: dict[str, str] = {}
    for step in steps:
        if isinstance(step, View):
            root[step.name] = root.get(step.base, step.base)
    reads: list[set[str]] = []
    writes: list[set[str]] = []
    for step in steps:
        r, w = _accesses(step)
        reads.append(r | {root[n] for n in r if n in root})
        writes.append(w | {root[n] for n in w if n in root})
    writers: dict[str, list[int]] = defaultdict(list)
    users: dict[str, list[int]] = defaultdict(list)
    for i in range(len(steps)):
        for n in writes[i]:
            writers[n].append(i)
        for n in reads[i] | writes[i]:
            users[n].append(i)
    alive_names = set(alive)
    member_writes: set[str] = set()
    # (latest, position, earliest, bytes read, bytes written)
    windows: list[tuple[int, int, int, int, int]] = []
    for p, step in enumerate(steps):
        size = _member_bytes(step, buffers, max_numel, alive_names)
        if size is None or reads[p] & member_writes:
            continue
        member_writes |= writes[p]
        earliest = max((_before(writers[n], p) + 1 for n in reads[p]), default=0)
        latest = min(
            [_after(users[n], p, len(steps)) for n in writes[p]]
            + [_after(writers[n], p, len(steps)) for n in reads[p]]
        )
        windows.append((latest, p, earliest, *size))
    windows.sort()
    # bytes that moved kernels keep alive beyond the original schedule, at each step: a kernel
    # run earlier holds its outputs from its slot to where it was, one run later its inputs
    extra = torch.zeros(len(steps) + 1, dtype=torch.int64)

    def moved(p: int, slot: int, read: int, written: int) -> tuple[slice, int]:
        return (slice(slot, p), written) if slot <= p else (slice(p + 1, slot), read)

    groups: dict[int, list[list[int]]] = defaultdict(list)  # slot -> groups of positions
    placed: set[int] = set()
    for k, (slot, p, *_) in enumerate(windows):
        if p in placed:
            continue
        group: list[int] = []
        held: list[tuple[slice, int]] = []
        for _, q, earliest, read, written in windows[k:]:
            if len(group) == max_members:
                break
            if q in placed or earliest > slot:
                continue
            span, size = moved(q, slot, read, written)
            if span.stop > span.start and size + int(extra[span].max()) > max_bytes:
                continue
            group.append(q)
            held.append((span, size))
            extra[span] += size
        if len(group) > 1 and group[0] == p:
            placed.update(group)
            groups[slot].append(sorted(group))
        else:  # no group: nothing moves
            for span, size in held:
                extra[span] -= size
    if not groups:
        return list(steps)
    out: list[Any] = []
    made = 0
    for i in range(len(steps) + 1):
        for group in groups.get(i, ()):
            out.append(combo_spec(f"combo{made}", [steps[q] for q in group]))
            made += 1
        if i < len(steps) and i not in placed:
            out.append(steps[i])
    return out


def combo_spec(name: str, members: Sequence[KernelSpec]) -> KernelSpec:
    """One kernel launching ``members`` (independent pointwise kernels of static sizes)."""
    inputs: dict[str, None] = {}
    outputs: dict[str, None] = {}
    used: dict[str, BufferSpec] = {}
    total = 0
    for m in members:
        inputs.update(dict.fromkeys(m.inputs))
        outputs.update(dict.fromkeys(m.outputs))
        used.update(m.buffers)
        total += _numel(m.xranges) or 0
    return KernelSpec(
        name,
        (sympy.Integer(total),),
        (),
        (),
        used,
        tuple(inputs),
        tuple(outputs),
        combo=tuple(members),
    )


def _accesses(step: Any) -> tuple[set[str], set[str]]:
    """(names read, names written) by ``step``; an extern call counts as writing all it uses (an
    ATen op may write an argument in place)."""
    if isinstance(step, KernelSpec):
        return set(step.inputs), set(step.outputs)
    if isinstance(step, ExternCall):
        uses = step_uses(step)
        return uses, uses
    if isinstance(step, View):
        return {step.base}, {step.name}
    return set(), set()


def _before(positions: list[int], p: int) -> int:
    """The last of ``positions`` (sorted) before ``p``; -1 if none."""
    k = bisect.bisect_left(positions, p)
    return positions[k - 1] if k else -1


def _after(positions: list[int], p: int, end: int) -> int:
    """The first of ``positions`` (sorted) after ``p``; ``end`` if none."""
    k = bisect.bisect_right(positions, p)
    return positions[k] if k < len(positions) else end


def _member_bytes(
    step: Any, buffers: Mapping[str, BufferSpec], max_numel: int, alive: set[str]
) -> tuple[int, int] | None:
    """(bytes read, bytes written) by ``step``, not counting buffers in ``alive``, if it may be
    a member of a combo kernel, else None."""
    if not isinstance(step, KernelSpec) or step.rranges or step.row_programs or step.combo:
        return None
    if step.size_args or set(step.inputs) & set(step.outputs):
        return None
    if not 0 < (_numel(step.xranges) or 0) <= max_numel:  # static sizes only
        return None
    total = [0, 0]
    for name in step.args:
        spec = buffers.get(name) or step.buffers.get(name)
        size = _nbytes(spec) if spec is not None else None
        if size is None:
            return None
        if name not in alive:
            total[name in step.outputs] += size
    from .in_place import _replay

    rec = _replay(step)
    if rec is None or rec.checked_index or any(a[4] for a in rec.seen if a[0] == "store"):
        return None  # a body we cannot replay, a checked index, an atomic store
    return total[0], total[1]
