"""Readable text for index expressions, IR bodies, the lowered graph and the schedule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from .handlers import DefaultHandler
from .indexing import FloorDiv, ModularIndexing, index_symbol
from .ops import ALL_OPS, set_ops_handler


def format_index(expr: Any) -> str:
    """An index expression as text (``FloorDiv``/``ModularIndexing`` printed by name)."""
    if isinstance(expr, sympy.Basic):
        return str(expr)
    return repr(expr)


def _fmt(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return "torch." + str(value).replace("torch.", "")
    if isinstance(value, str):
        return value if value.startswith("tmp") else repr(value)
    if isinstance(value, sympy.Basic):
        return format_index(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


class _Tmp(str):
    """A printed value: the name of the temporary holding it."""


class PrintingHandler(DefaultHandler):
    """An ops handler that records each op as a line ``tmpN = ops.name(args)``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._count = 0
        self._indirect = 0

    def _emit(self, name: str, args: tuple, kwargs: dict) -> _Tmp:
        parts = [_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
        call = f"ops.{name}({', '.join(parts)})"
        if name in ("store", "store_reduction"):
            self.lines.append(call)
            return _Tmp("None")
        tmp = _Tmp(f"tmp{self._count}")
        self._count += 1
        self.lines.append(f"{tmp} = {call}")
        return tmp

    def indirect_indexing(self, value, size, check=True):
        sym = index_symbol("i", self._indirect)
        self._indirect += 1
        self.lines.append(f"{sym} = ops.indirect_indexing({_fmt(value)}, {_fmt(size)})")
        return sym

    def reduction(self, dtype, src_dtype, reduction_type, value):
        tmp = self._emit("reduction", (dtype, src_dtype, reduction_type, value), {})
        if reduction_type.startswith("welford"):  # (mean, m2, weight), as the contract says
            return tuple(_Tmp(f"{tmp}[{i}]") for i in range(3))
        return tmp

    def masked(self, mask, body, other):
        self.lines.append(f"with ops.masked({_fmt(mask)}, other={other!r}):")
        start = len(self.lines)
        result = body()
        self.lines[start:] = ["    " + line for line in self.lines[start:]]
        tmp = _Tmp(f"tmp{self._count}")
        self._count += 1
        self.lines.append(f"{tmp} = masked_result({_fmt(result)})")
        return tmp

    default_ops = ALL_OPS

    def default(self, name: str, args: tuple, kwargs: dict) -> _Tmp:
        return self._emit(name, args, kwargs)


def format_body(body: Callable[..., Any], nranges: int, nrranges: int, indent: str = "    ") -> str:
    """Run ``body(xvars, rvars)`` under a printing handler and return its ops as text."""
    handler = PrintingHandler()
    xs = [index_symbol("x", i) for i in range(nranges)]
    rs = [index_symbol("r", i) for i in range(nrranges)]
    with set_ops_handler(handler):
        body(xs, rs)
    return "\n".join(indent + line for line in handler.lines)


def format_graph_ir(graph: Any) -> str:
    from .ir import ComputedBuffer, ExternKernel, NamedView

    out = ["GraphIR("]
    for inp in graph.inputs:
        out.append(f"  {inp.name}: InputBuffer {inp.layout}")
    for node in graph.nodes:
        if isinstance(node, ComputedBuffer):
            kind = "Reduction" if node.is_reduction else "Pointwise"
            out.append(f"  {node.name}: ComputedBuffer {node.layout}")
            out.append(f"    realized because: {node.reason}")
            ranges = ", ".join(map(str, node.ranges))
            if node.is_reduction:
                rr = ", ".join(map(str, node.reduction_ranges))
                part = node.data.output_index
                part = "" if part is None else f", output_index={part}"
                out.append(
                    f"    {kind}(ranges=[{ranges}], reduction_ranges=[{rr}], type={node.data.reduction_type}{part})"
                )
            else:
                out.append(f"    {kind}(ranges=[{ranges}])")
            # the recording the scheduler and code generators read (its iteration variables:
            # dims of size 1 dropped, channels-last in memory order)
            out.append("\n".join("    " + line for line in str(node.loop_body).splitlines()))
        elif isinstance(node, ExternKernel):
            names = ", ".join(b.name for b in node.outputs if b is not None)
            out.append(f"  {names} = ExternKernel[{node.kind}] {node.op}  ({node.reason})")
            for b in node.outputs:
                if b is not None:
                    out.append(f"    {b.name}: {b.layout}")
        elif isinstance(node, NamedView):
            out.append(f"  {node.name} = view of {node.view.base.name}: {node.view.layout}")
    outs = ", ".join(getattr(o, "name", repr(o)) for o in graph.outputs)
    out.append(f"  outputs: [{outs}]")
    out.append(")")
    return "\n".join(out)


def format_kernel(step: Any, indent: str = "") -> str:
    """A KernelSpec as text: ranges, buffers, and each stage's node bodies."""
    xr = ", ".join(map(str, step.xranges))
    rr = ", ".join(map(str, step.rranges))
    head = (
        f"{indent}{step.name}: xranges=[{xr}] rranges=[{rr}] inputs={list(step.inputs)} "
        f"outputs={list(step.outputs)} local={sorted(step.local_buffers)} size_args={list(step.size_args)}"
    )
    if getattr(step, "row_programs", 0):
        head += f" row_programs={step.row_programs}"
    members = getattr(step, "combo", ())
    if members:
        head += f" combo of {len(members)} kernels (combos.py)"
    out = [head]
    out += [format_kernel(m, indent + "  ") for m in members]
    for stage in step.stages:
        out.append(f"{indent}  stage {stage.kind}:")
        for node in stage.nodes:
            across = ", across the rows of a program" if getattr(node, "across_rows", False) else ""
            out.append(f"{indent}    # {node.buffer} ({node.origin}){across}")
            nr = len(step.rranges) if stage.kind == "loop" else 0
            out.append(format_body(node.body, len(step.xranges), nr, indent + "    "))
    return "\n".join(out)


def format_scheduled_graph(graph: Any) -> str:
    """A ScheduledGraph as text: each step, and each kernel's stages and node bodies."""
    from .backend import ExternCall, Free, KernelSpec, View

    out = [f"ScheduledGraph(inputs={list(graph.inputs)}, outputs={list(graph.outputs)})"]
    for step in graph.steps:
        if isinstance(step, KernelSpec):
            out.append(format_kernel(step, "  "))
        elif isinstance(step, ExternCall):
            out.append(f"  {', '.join(step.outputs)} = {step.kind} {step.op} ({step.reason})")
        elif isinstance(step, View):
            out.append(
                f"  {step.name} = view({step.base}, size={list(step.size)}, stride={list(step.stride)}, offset={step.offset})"
            )
        elif isinstance(step, Free):
            out.append(f"  del {step.name}")
    if graph.reuse:
        out.append(f"  reuse: {dict(graph.reuse)}")
    return "\n".join(out)


__all__ = [
    "FloorDiv",
    "ModularIndexing",
    "PrintingHandler",
    "format_body",
    "format_graph_ir",
    "format_index",
    "format_kernel",
    "format_scheduled_graph",
]
