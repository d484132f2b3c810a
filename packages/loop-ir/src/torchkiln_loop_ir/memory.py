"""Buffer planning: dead-code elimination, lifetimes, ``Free`` steps and reuse of dead buffers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch.utils._pytree as pytree
from torch._ops import OpOverload

from .backend import BufferRef, BufferSpec, ExternCall, Free, KernelSpec, View
from .ir import Buffer, ComputedBuffer, ExternKernel, NamedView

#: operators whose result is a tensor they keep and return again on later calls (a weight
#: converted once, such as channels_last.py's ``conv_taps``): never written over, whatever a
#: kernel reads of it. The passes that make such operators register them (``keep_result``).
KEPT_RESULTS: set[OpOverload] = set()


def keep_result(op: OpOverload) -> OpOverload:
    """Say that ``op`` returns a tensor it keeps for later calls (``KEPT_RESULTS``)."""
    KEPT_RESULTS.add(op)
    return op


def _reads_of(node: Any) -> set[str]:
    if isinstance(node, ComputedBuffer):
        extra = {node.write_name} if node.is_scatter else set()  # it updates its target in place
        return set(node.loop_body.read_names) | extra
    if isinstance(node, NamedView):
        return {node.view.base.name}
    leaves = pytree.tree_leaves((node.args, node.kwargs))
    return {x.name for x in leaves if isinstance(x, (Buffer, NamedView))}


def _writes_of(node: Any) -> set[str]:
    if isinstance(node, ExternKernel):
        return {b.name for b in node.outputs if b is not None}
    if isinstance(node, ComputedBuffer):
        return {node.write_name}
    return {node.name}


def _has_effect(node: Any) -> bool:
    """An extern call kept though no buffer of it is read: one that binds a size symbol
    (``.item()``'s u0, read by the sizes after it) or returns nothing (a run-time check)."""
    return isinstance(node, ExternKernel) and (
        bool(node.scalars) or all(o is None for o in node.outputs)
    )


def eliminate_dead_code(nodes: Sequence[Any], outputs: set[str]) -> list[Any]:
    """Drop realized nodes whose results nobody reads (walking backwards)."""
    live = set(outputs)
    kept: list[Any] = []
    for node in reversed(list(nodes)):
        if _writes_of(node) & live or _has_effect(node):
            kept.append(node)
            live |= _reads_of(node)
    return list(reversed(kept))


def step_uses(step: Any) -> set[str]:
    if isinstance(step, KernelSpec):
        return set(step.inputs) | set(step.outputs)
    if isinstance(step, ExternCall):
        leaves = pytree.tree_leaves((step.args, step.kwargs))
        return {x.name for x in leaves if isinstance(x, BufferRef)} | {o for o in step.outputs if o}
    if isinstance(step, View):
        return {step.base, step.name}
    return set()


def plan_memory(
    steps: Sequence[Any],
    buffers: dict[str, BufferSpec],
    inputs: Sequence[str],
    outputs: set[str],
    reuse: bool = True,
) -> tuple[list[Any], dict[str, str]]:
    """Insert ``Free`` after each buffer's last use and pick dead buffers to reuse.

    Only kernel outputs (allocated by the wrapper) are reused. Buffers a fallback reads or returns
    live to the end: an ATen fallback may return an alias of its input. The base of a view dies
    with the last use of the base or of any view of it (a view the graph returns pins its base).
    """
    # Inputs are freed (their names dropped) at their last use too: when the caller gave its
    # references away (``call_boxed``) that frees them; they are never reused (not ours to write).
    pinned = set(outputs)
    base_of: dict[str, str] = {}
    for step in steps:
        if isinstance(step, View):
            base_of[step.name] = base_of.get(step.base, step.base)
        elif isinstance(step, ExternCall) and step.kind == "fallback":
            pinned |= step_uses(step)  # an ATen fallback may return an alias of its input
    for name, base in base_of.items():
        if name in pinned:  # a returned view, or one a fallback reads: its storage must survive
            pinned.add(base)
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        for name in step_uses(step):
            last[name] = i
            if name in base_of:
                last[base_of[name]] = i
    # what dies at each step: a view base dies at the last use of any of its views (a view is
    # a second name for the base's storage), so it is freed, and its storage reused, only then
    dies: dict[int, list[str]] = defaultdict(list)
    for name, i in last.items():
        if name not in pinned:
            dies[i].append(name)
    kernel_made = {
        o for s in steps if isinstance(s, KernelSpec) for o in s.outputs if o not in s.inputs
    }
    made_at = {
        o: i
        for i, s in enumerate(steps)
        if isinstance(s, (KernelSpec, ExternCall))
        for o in (s.outputs if isinstance(s, ExternCall) else ())
        if o
    } | {
        o: i
        for i, s in enumerate(steps)
        if isinstance(s, KernelSpec)
        for o in s.outputs
        if o in kernel_made
    }
    live = _live_bytes(steps, buffers, made_at, dies)
    peak = max(live, default=0)
    out: list[Any] = []
    mapping: dict[str, str] = {}
    # dead kernel outputs available for reuse, by layout: (name, the step it died at)
    pool: dict[tuple, list[tuple[str, int]]] = defaultdict(list)
    viewed = set(base_of) | set(base_of.values())
    # storage the graph owns alone: kernel outputs, and the results of named ATen kernels (mm,
    # convolution, attention: fresh tensors; a fallback or a control-flow operator may return
    # an alias of its input; a KEPT_RESULTS operator returns a tensor it keeps for later calls)
    owned = kernel_made | {
        o
        for s in steps
        if isinstance(s, ExternCall)
        and s.kind == "extern"
        and isinstance(s.op, OpOverload)
        and s.op not in KEPT_RESULTS
        for o in s.outputs
        if o
    }
    written_over: set[str] = set()  # buffers a kernel's output took in place
    for i, step in enumerate(steps):
        if reuse and isinstance(step, KernelSpec):
            dying = [
                n
                for n in sorted(dies.get(i, ()))
                if n in step.inputs and n in owned and n not in step.outputs and n not in viewed
            ]
            for o in step.outputs:
                if o in step.inputs or o in pinned or o not in kernel_made:
                    continue
                inp = _in_place_input(step, o, dying, buffers)
                if inp is not None:
                    mapping[o] = inp
                    dying.remove(inp)
                    written_over.add(inp)
                    continue
                taken = _take_from_pool(
                    pool.get(_layout_key(buffers[o])), i, live, peak, _nbytes(buffers[o])
                )
                if taken is not None:
                    mapping[o] = taken
        out.append(step)
        for name in sorted(dies.get(i, ())):
            out.append(Free(name))
            if name in kernel_made and name not in written_over:
                pool[_layout_key(buffers[name])].append((name, i))
    return out, mapping


def _in_place_input(
    step: KernelSpec, output: str, dying: Sequence[str], buffers: dict[str, BufferSpec]
) -> str | None:
    """An input of ``step`` that dies there (a buffer this graph made: a kernel's output or an
    extern's result, never a graph input or a view's storage) which ``output`` can be written
    over, or None. Safe when the kernel reads each element of it before writing the same
    element, in the same iteration: ``output`` stored once, plainly, outside a reduction loop,
    every load of the input at the store's index before it (``in_place._reads_match_store``,
    the rule for mutated graph inputs). A residual add after a convolution then writes into the
    convolution's result instead of a third activation-sized buffer, as torch.compile's
    in-place reuse does."""
    from .in_place import _reads_match_store, _same_layout

    for name in dying:
        if _same_layout(buffers.get(output), buffers.get(name)) and _reads_match_store(
            step, name, output
        ):
            return name
    return None


def _nbytes(spec: BufferSpec) -> int | None:
    """Bytes of a buffer's storage, None for a symbolic size."""
    try:
        size = [int(s) for s in spec.size]
        stride = [int(s) for s in spec.stride]
    except TypeError:
        return None
    numel = 0 if 0 in size else 1 + sum((s - 1) * st for s, st in zip(size, stride))
    return numel * spec.dtype.itemsize


def _live_bytes(
    steps: Sequence[Any],
    buffers: dict[str, BufferSpec],
    made_at: dict[str, int],
    dies: dict[int, list[str]],
) -> list[int]:
    """Bytes of the buffers the plan makes that are alive during each step, with every dead
    buffer freed at once (no reuse); symbolic sizes count 0."""
    delta = [0] * (len(steps) + 1)
    for name, i in made_at.items():
        delta[i] += _nbytes(buffers[name]) or 0
    for i, names in dies.items():
        for name in names:
            if name in made_at:
                delta[i + 1] -= _nbytes(buffers[name]) or 0
    live, total = [], 0
    for i in range(len(steps)):
        total += delta[i]
        live.append(total)
    return live


def _take_from_pool(
    free: list[tuple[str, int]] | None, step: int, live: list[int], peak: int, nbytes: int | None
) -> str | None:
    """A dead buffer for the output made at ``step``, or None. Keeping a dead buffer for reuse
    holds its memory from its death to ``step``; it is taken only when that does not raise the
    plan's peak (a GPU's caching allocator reuses freed memory anyway; on CPUs reuse saves the
    allocation). The latest to die is tried first: it is held the shortest."""
    if not free:
        return None
    for k in range(len(free) - 1, -1, -1):
        name, died = free[k]
        held = live[died + 1 : step]
        if nbytes is not None and held and max(held) + nbytes > peak:
            continue
        for j in range(died + 1, step):
            live[j] += nbytes or 0
        del free[k]
        return name
    return None


def _layout_key(a: BufferSpec) -> tuple:
    """Buffers with equal keys can stand in for each other."""
    return (a.dtype, a.device, tuple(a.size), tuple(a.stride))


def planned_peak_bytes(graph: Any) -> int | None:
    """The most bytes the wrapper of ``graph`` (a ``ScheduledGraph``) holds at once in buffers it
    makes itself (kernel outputs and extern results), following its ``Free`` steps, its reuse and
    its views (a view shares its base's storage); inputs are the caller's and not counted. None
    when a buffer's size is symbolic (the peak then depends on the call)."""
    reused_by = {old: new for new, old in graph.reuse.items()}
    storage_of: dict[str, int] = {}
    names_of: dict[int, set[str]] = defaultdict(set)
    size_of: dict[int, int] = {}
    live = peak = 0

    def bind(name: str, storage: int) -> None:
        storage_of[name] = storage
        names_of[storage].add(name)

    def allocate(name: str) -> bool:
        nonlocal live, peak
        spec = graph.buffers[name]
        try:
            size = [int(s) for s in spec.size]
            stride = [int(s) for s in spec.stride]
        except TypeError:
            return False
        numel = 0 if 0 in size else 1 + sum((s - 1) * st for s, st in zip(size, stride))
        storage = len(size_of)
        size_of[storage] = numel * spec.dtype.itemsize
        bind(name, storage)
        live += size_of[storage]
        peak = max(peak, live)
        return True

    def drop(name: str) -> None:
        nonlocal live
        storage = storage_of.pop(name, None)
        if storage is None:
            return
        names_of[storage].discard(name)
        if not names_of[storage]:
            live -= size_of[storage]

    for step in graph.steps:
        if isinstance(step, KernelSpec):
            for name in step.outputs:
                if name in step.inputs:
                    continue
                if name in graph.reuse:
                    old = graph.reuse[name]
                    if old in graph.inputs:  # written into the caller's input (in_place.py)
                        continue
                    if old in storage_of:
                        bind(name, storage_of[old])
                        drop(old)
                        continue
                if not allocate(name):
                    return None
        elif isinstance(step, ExternCall):
            for name in filter(None, step.outputs):
                if not allocate(name):
                    return None
        elif isinstance(step, View):
            if step.base in storage_of:
                bind(step.name, storage_of[step.base])
        elif isinstance(step, Free) and step.name not in reused_by:
            drop(step.name)
    return peak
