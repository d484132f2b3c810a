"""The floor of each step's cost in a schedule: the bytes a kernel must move, the FLOPs an extern
matmul or convolution performs. A profiler's time per kernel divided by these gives the kernel's
achieved bandwidth or FLOP/s, and its distance from the device's limits (``step_costs``; the
meta-package's debug dump writes them beside the kernels, ``benchmarks/gpu_kernel_profile.py``
joins them with measured times).

A generated kernel's floor counts each buffer it reads and each it writes once, but no more of a
buffer than the kernel has iteration points (``xnumel * rnumel``): an embedding gather reads its
rows, not the whole table; a slice of a wider buffer, the slice; a broadcast weight, itself.
Buffers the kernel keeps local never reach memory. A buffer both read and written counts twice.
Sizes that are not integers (dynamic shapes) give no figure (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy

from .backend import BufferRef, BufferSpec, ExternCall, KernelSpec, ScheduledGraph
from .ir import product


def _numel(sizes: Sequence[Any]) -> int | None:
    n = sympy.sympify(product(sizes))
    return int(n) if n.is_Integer else None


def kernel_bytes(spec: KernelSpec) -> int | None:
    """Bytes ``spec`` reads and writes at least (see the module docstring), or None."""
    points = _numel((*spec.xranges, *spec.rranges))
    if points is None:
        return None
    total = 0
    for names in (spec.inputs, spec.outputs):
        for name in names:
            if name in spec.local_buffers:
                continue
            buf = spec.buffers[name]
            n = _numel(buf.size)
            if n is None:
                return None
            total += min(n, points) * buf.dtype.itemsize
    return total


#: matmul-like ATen ops (and ``pad_mm``'s padded-output one): the positions of their two
#: operands among the call's arguments
_MATMULS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2), "mm_padded_n": (1, 2)}
#: forward convolutions (ATen's and loop-ir's own extern ops): the position of the weight
_CONVOLUTIONS = {
    "convolution": 1,
    "conv_channels_last": 1,
    "conv1x1_channels_last": 1,
    "mkldnn_convolution": 1,
    "mkldnn_convolution_add": 2,
}


def _sizes(arg: Any, buffers: Mapping[str, BufferSpec]) -> tuple[Any, ...] | None:
    if isinstance(arg, BufferRef) and arg.name in buffers:
        return tuple(buffers[arg.name].size)
    return None


def extern_flops(call: ExternCall, buffers: Mapping[str, BufferSpec]) -> int | None:
    """Multiply-add FLOPs (2 a product) of ``call`` when it is a matmul (``mm``, ``addmm``,
    ``bmm``, ``baddbmm``, ``pad_mm``'s ``mm_padded_n``: its N unpadded) or a forward convolution (ATen's, or loop-ir's channels-last and oneDNN
    extern ops) of static sizes; None for anything else (attention, a convolution's backward)."""
    packet = getattr(call.op, "overloadpacket", call.op)
    name = str(getattr(packet, "__name__", call.op)).split(".")[-1]
    if name in _MATMULS:
        i, j = _MATMULS[name]
        if len(call.args) <= max(i, j):
            return None
        a, b = _sizes(call.args[i], buffers), _sizes(call.args[j], buffers)
        if a is None or b is None or len(a) < 2 or len(b) < 2:
            return None
        m_k = _numel(a)
        n = _numel(b[-1:])
        return None if m_k is None or n is None else 2 * m_k * n
    if name in _CONVOLUTIONS and call.outputs:
        w = _CONVOLUTIONS[name]
        weight = _sizes(call.args[w], buffers) if len(call.args) > w else None
        out = buffers.get(call.outputs[0])
        if weight is None or out is None or len(weight) < 2:
            return None
        per_output = _numel(weight[1:])  # input channels of a group times the kernel's taps
        outputs = _numel(out.size)
        return None if per_output is None or outputs is None else 2 * outputs * per_output
    return None


def step_costs(scheduled: ScheduledGraph) -> list[dict[str, Any]]:
    """One record per kernel and extern call of ``scheduled``, in schedule order: ``kind``
    ("kernel" or "extern"), ``name`` (the kernel's launch site, or the extern's op), ``bytes``
    (a kernel's floor, see the module docstring) and ``flops`` (an extern's, ``extern_flops``);
    None where not known."""
    out: list[dict[str, Any]] = []
    for step in scheduled.steps:
        if isinstance(step, KernelSpec):
            out.append({"kind": "kernel", "name": step.name, "bytes": kernel_bytes(step)})
        elif isinstance(step, ExternCall):
            flops = extern_flops(step, scheduled.buffers)
            out.append({"kind": "extern", "name": str(step.op), "flops": flops})
    return out


__all__ = ["extern_flops", "kernel_bytes", "step_costs"]
