"""Mutated graph inputs written in place: the kernel computing an input's new value stores it
into the input's own memory, so the caller has nothing to copy back.

A functional graph returns the new value of each input it mutates (batch norm's running
statistics, ``x.add_(1)``); its caller copies each one into the input afterwards, one device copy
per input per call (160 per ResNet-50 training step). Contract C2's
``gm.meta["mutations_in_place"]`` names the pairs ``(output position, input position)`` the caller
allows to be written in place (aot-partition's ``mutation.in_place_mutations`` says which). For
each, ``in_place_writes`` decides here, on the final schedule, whether the write is safe:

- the output is a buffer one kernel computes (not an extern's result, a view or an input),
  returned at that position only (not also a user output or a saved value), with the input's
  exact layout (dtype, device, sizes, strides, no offset);
- no step after that kernel uses the input, no view of the input is ever made, no ATen fallback
  reads it (a fallback may return an alias of it), nothing else writes it, and the graph does
  not return the input itself;
- no kernel after that one checks a computed index (gather, embedding, ``x[idx]``: an index out
  of range is the user's error, which eager raises after its own effects once; after an
  in-place write the graph cannot be run again eagerly to raise it). Any other failure after a
  write (an extern's, a fallback's) is marked, as below;
- inside the kernel, the value is stored with a plain ``store`` (no atomic mode, no
  ``store_reduction``) in an epilogue stage or a kernel without a reduction loop, and every load
  of the input is in that same stage, at the very index of the store, before it in the order
  the bodies emit their ops: each element is read before it is written, by the same iteration
  (a split reduction runs an epilogue once per x-index, after its loops).

The buffer then reuses the input (``ScheduledGraph.reuse``: buffer -> input name; the wrapper
binds it to the input tensor instead of allocating), so the compiled graph returns the input
tensor itself at that position, which is how the caller sees the write was made (it copies any
other value as before). A graph whose wrapper writes inputs marks an exception raised after the
first such write (``inputs_written_in_place = True``), so the caller does not run the graph
again eagerly, which would apply the mutation twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from .backend import BufferSpec, ExternCall, KernelSpec, View
from .handlers import NoOpHandler
from .indexing import index_symbol
from .ir import Buffer, GraphIR, NamedView
from .memory import step_uses
from .ops import set_ops_handler

#: contract C2: the graph meta key naming the (output position, input position) pairs
META_KEY = "mutations_in_place"


def requested_in_place(gm: torch.fx.GraphModule, backend: Any) -> tuple[tuple[int, str], ...]:
    """The (output position, placeholder name) pairs ``gm.meta`` allows to be written in place
    (read before the graph passes, which make new GraphModules without the meta); none for a
    backend that does not declare ``supports_in_place_inputs`` (its kernels might assume their
    arguments never alias, or rerun a launch to time it)."""
    pairs = gm.meta.get(META_KEY) or ()
    if not getattr(backend, "supports_in_place_inputs", False):
        return ()
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple((int(k), names[i]) for k, i in pairs if 0 <= i < len(names))


def in_place_writes(
    steps: Sequence[Any], buffers: Mapping[str, BufferSpec], graph: GraphIR
) -> dict[str, str]:
    """buffer -> the graph input its kernel writes it into (see the module docstring)."""
    requested = getattr(graph, "in_place", ())
    if not requested:
        return {}
    outs = [o.name if isinstance(o, (Buffer, NamedView)) else None for o in graph.outputs]
    inputs = set(graph.input_names or [b.name for b in graph.inputs])
    viewed = {s.base for s in steps if isinstance(s, View)}
    # the last kernel that checks a computed index: no write in place before it (each kernel's
    # bodies replayed once, not once per requested pair)
    last_check = max((i for i, step in enumerate(steps) if _may_raise(step)), default=-1)
    chosen: dict[str, str] = {}
    for pos, inp in requested:
        name = outs[pos] if 0 <= pos < len(outs) else None
        if (
            name is None
            or inp not in inputs
            or name in inputs
            or outs.count(name) != 1
            or inp in outs
            or inp in viewed
            or inp in chosen.values()
            or not _same_layout(buffers.get(name), buffers.get(inp))
        ):
            continue
        writer = _writer(steps, name)
        if writer is None or not _only_read_before(steps, writer, inp):
            continue
        if writer < last_check:
            continue
        if _reads_match_store(steps[writer], inp, name):
            chosen[name] = inp
    return chosen


def _same_layout(a: BufferSpec | None, b: BufferSpec | None) -> bool:
    return (
        a is not None
        and b is not None
        and a.dtype == b.dtype
        and str(a.device) == str(b.device)
        and tuple(a.size) == tuple(b.size)
        and tuple(a.stride) == tuple(b.stride)
        and sympy.sympify(a.offset) == 0
        and sympy.sympify(b.offset) == 0
    )


def _writer(steps: Sequence[Any], name: str) -> int | None:
    """The position of the kernel step that computes ``name`` (not updating it in place)."""
    for i, step in enumerate(steps):
        if isinstance(step, KernelSpec) and name in step.outputs:
            if name in step.inputs or name in step.local_buffers:
                return None
            return i
        if isinstance(step, ExternCall) and name in step.outputs:
            return None
    return None


def _only_read_before(steps: Sequence[Any], writer: int, inp: str) -> bool:
    """No step after ``writer`` uses ``inp``, no fallback reads it, and nothing writes it."""
    for i, step in enumerate(steps):
        if isinstance(step, KernelSpec):
            if inp in step.outputs or (i > writer and inp in step.inputs):
                return False
        elif isinstance(step, ExternCall):
            uses = step_uses(step)
            if inp in uses and (i > writer or step.kind == "fallback" or inp in step.outputs):
                return False
        elif isinstance(step, View) and step.base == inp:
            return False
    return True


def _may_raise(step: Any) -> bool:
    """Whether ``step`` is a kernel indexing with a checked computed index (gather, embedding,
    ``x[idx]``), which raises the user's IndexError for an index out of range."""
    if not isinstance(step, KernelSpec):
        return False
    if step.combo:
        return any(_may_raise(m) for m in step.combo)
    rec = _replay(step)
    return rec is None or rec.checked_index  # a body we cannot replay here: assume it may


def _replay(step: KernelSpec) -> _Accesses | None:
    """The loads, stores and checked indices of ``step``'s bodies, run at the kernel's index
    symbols in emission order; None when a body cannot be replayed here."""
    xs = [index_symbol("x", i) for i in range(len(step.xranges))]
    rs = [index_symbol("r", i) for i in range(len(step.rranges))]
    rec = _Accesses()
    try:
        with set_ops_handler(rec):
            for s, stage in enumerate(step.stages):
                rec.stage = s
                for node in stage.nodes:
                    node.body(xs, rs if stage.kind == "loop" else ())
    except Exception:  # noqa: BLE001 - an analysis only: the code generator reports real errors
        return None
    return rec


class _Accesses(NoOpHandler):
    """Records each load and store of a kernel's bodies: (op, buffer, index, stage, mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.stage = 0
        self.seen: list[tuple[str, str, Any, int, Any]] = []
        self.checked_index = False

    def indirect_indexing(self, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
        self.checked_index = self.checked_index or bool(check)
        return super().indirect_indexing(value, size, check)

    def load(self, name: str, index: Any) -> None:
        self.seen.append(("load", name, index, self.stage, None))

    def store(self, name: str, index: Any, value: Any, mode: str | None = None) -> None:
        self.seen.append(("store", name, index, self.stage, mode))

    def store_reduction(self, name: str, index: Any, value: Any) -> None:
        self.seen.append(("store_reduction", name, index, self.stage, None))


def _reads_match_store(step: KernelSpec, inp: str, name: str) -> bool:
    """Inside ``step``: ``name`` stored once, plainly, in an epilogue (or a kernel without a
    reduction loop), and every load of ``inp`` in that stage at that index. In a combo kernel
    (``combos.py``), of the member storing ``name``, no other member reading ``inp`` (members
    run at the same time)."""
    if step.combo:
        member = next((m for m in step.combo if name in m.outputs), None)
        if member is None or any(inp in m.inputs for m in step.combo if m is not member):
            return False
        step = member
    if step.template is not None and inp in step.template.operands:
        return False  # the product reads its operands whole, not element by element
    rec = _replay(step)
    if rec is None:  # a body we cannot replay here: no in-place write
        return False
    stores = [k for k, a in enumerate(rec.seen) if a[1] == name and a[0] != "load"]
    if len(stores) != 1:
        return False
    at = stores[0]
    op, _, index, stage, mode = rec.seen[at]
    if op != "store" or mode is not None:
        return False
    if step.stages[stage].kind == "loop" and step.rranges:
        return False
    # every load of the input comes before the store (a code generator emits the bodies in this
    # order), in its stage, at its index
    return all(
        k < at and a[0] == "load" and a[3] == stage and _same_index(a[2], index)
        for k, a in enumerate(rec.seen)
        if a[1] == inp
    )


def _same_index(a: Any, b: Any) -> bool:
    try:
        a, b = sympy.sympify(a), sympy.sympify(b)
        return bool(a == b or sympy.expand(a - b) == 0)
    except (TypeError, ValueError, sympy.SympifyError):
        return False


__all__ = ["META_KEY", "in_place_writes", "requested_in_place"]
