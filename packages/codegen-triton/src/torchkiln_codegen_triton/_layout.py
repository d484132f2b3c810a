"""Which axis of a reduction kernel's 2-D block holds x and which holds r, decided per kernel.

Triton makes the *last* axis of a block the fastest-varying one across a warp's threads: a load
is coalesced when consecutive lanes of that axis read consecutive addresses. The default
layout puts x on axis 0 and r on axis 1 (``[XBLOCK, RBLOCK]``), right for an *inner* reduction
(a row sum, a softmax: memory contiguous along r). An *outer* reduction (a bias gradient: the sum
over rows of a ``[rows, cols]`` tensor, memory contiguous along x and strided along r) wants the
transposed block ``[RBLOCK, XBLOCK]``: r on axis 0, x on axis 1, lane reductions over axis 0 and
results shaped ``[1, XBLOCK]``.

``choose_layout`` reads the kernel's memory accesses (a recording pass over the node bodies)
and weighs each access that varies along both x and r by its element size: contiguous along the
innermost x variable counts for the transposed layout, contiguous along the innermost r variable
for the default one. The heavier side wins (ties keep the default); the reason is kept in the
layout and written into the kernel source as a comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.handlers import NoOpHandler
from torchkiln_loop_ir.indexing import contiguous_along, index_symbol, innermost_symbol
from torchkiln_loop_ir.ops import set_ops_handler


@dataclass(frozen=True)
class BlockLayout:
    """How x and r map to the axes of a reduction kernel's blocks (see the module docstring)."""

    transposed: bool = False
    reason: str = "default: x on axis 0, r on axis 1"
    #: the r block's width in the kernel's text (a whole walked row's edges take a literal one)
    rblock: str = "RBLOCK"

    @property
    def block(self) -> str:
        r = self.rblock
        return f"[{r}, XBLOCK]" if self.transposed else f"[XBLOCK, {r}]"

    @property
    def x_shape(self) -> str:
        return "[1, XBLOCK]" if self.transposed else "[XBLOCK, 1]"

    @property
    def r_shape(self) -> str:
        return f"[{self.rblock}, 1]" if self.transposed else f"[1, {self.rblock}]"

    @property
    def x_arange(self) -> str:
        """The subscript that makes ``tl.arange(0, XBLOCK)`` a 2-D x block."""
        return "[None, :]" if self.transposed else "[:, None]"

    @property
    def r_arange(self) -> str:
        return "[:, None]" if self.transposed else "[None, :]"

    @property
    def raxis(self) -> int:
        """The block axis that the lane combination of a reduction reduces."""
        return 0 if self.transposed else 1

    def over_r(self, fn: str, text: str, *extra: str) -> str:
        """``fn(text, raxis, *extra)`` kept 2-D: a ``[XBLOCK, 1]`` / ``[1, XBLOCK]`` result."""
        args = ", ".join((text, str(self.raxis), *extra))
        return f"{fn}({args}){self.x_arange}"  # the x block's own 2-D shape


DEFAULT = BlockLayout()


class _AccessRecorder(NoOpHandler):
    """Records (buffer, index) of every load and store of memory a kernel body makes."""

    def __init__(self, memory: frozenset[str], loads_only: bool = False) -> None:
        super().__init__()
        self.memory = memory
        self.loads_only = loads_only
        self.accesses: list[tuple[str, sympy.Expr]] = []

    def _note(self, name: str, index: Any) -> None:
        if name in self.memory:
            self.accesses.append((name, sympy.sympify(index)))

    def load(self, name: str, index: Any) -> None:
        self._note(name, index)

    def store(self, name: str, index: Any, value: Any, mode: Any = None) -> None:
        if not self.loads_only:
            self._note(name, index)

    def store_reduction(self, name: str, index: Any, value: Any) -> None:
        if not self.loads_only:
            self._note(name, index)


def memory_accesses(
    spec: KernelSpec,
    loop_only: bool = False,
    *,
    stage_index: int | None = None,
    loads_only: bool = False,
) -> list[tuple[str, sympy.Expr]] | None:
    """(buffer, index) of each load and store of global memory in ``spec``'s bodies (of its loop
    stages only, with ``loop_only``; of stage ``stage_index`` only, when given; loads only,
    with ``loads_only``), at the kernel's index symbols; None when a body cannot be replayed
    here (an analysis only: the code generator reports real errors)."""
    memory = frozenset(n for n in (*spec.inputs, *spec.outputs) if n not in spec.local_buffers)
    recorder = _AccessRecorder(memory, loads_only)
    xvars = [index_symbol("x", i) for i in range(len(spec.xranges))]
    rvars = [index_symbol("r", i) for i in range(len(spec.rranges))]
    try:
        with set_ops_handler(recorder):
            for i, stage in enumerate(spec.stages):
                if (loop_only and stage.kind != "loop") or stage_index not in (None, i):
                    continue
                for node in stage.nodes:
                    node.body(list(xvars), list(rvars) if stage.kind == "loop" else [])
    except Exception:  # noqa: BLE001 - an analysis only
        return None
    return recorder.accesses


def choose_layout(spec: KernelSpec) -> BlockLayout:
    """The block layout for reduction kernel ``spec`` (see the module docstring)."""
    if spec.row_programs:
        return BlockLayout(False, "default: a mixed-order kernel's rows on axis 0, each whole")
    if not spec.rranges:
        return DEFAULT
    xvar, rvar = innermost_symbol(spec.xranges, "x"), innermost_symbol(spec.rranges, "r")
    if xvar is None or rvar is None:
        return DEFAULT
    accesses = memory_accesses(spec)
    if accesses is None:
        return BlockLayout(reason="default: the accesses could not be analysed")
    along_x = along_r = 0
    seen: set[tuple[str, sympy.Expr]] = set()
    for name, index in accesses:
        # equal expressions print equal: the expression is the key (printing it cost more than
        # the rest of the analysis)
        if (name, index) in seen:
            continue
        seen.add((name, index))
        along = contiguous_along(index, xvar, rvar)
        if along == "x":
            along_x += spec.buffers[name].dtype.itemsize
        elif along == "r":
            along_r += spec.buffers[name].dtype.itemsize
    if along_x > along_r:
        return BlockLayout(
            True,
            f"transposed: accesses contiguous along x move {along_x} bytes "
            f"per (x, r) point, along r {along_r} (an outer reduction)",
        )
    return BlockLayout(
        False,
        f"default: accesses contiguous along r move {along_r} bytes per "
        f"(x, r) point, along x {along_x}",
    )
