"""Copies made for a matrix multiply, written in the order they read.

``q @ k.transpose(-2, -1)`` on 4-D tensors (attention written by hand, or SDPA's math form,
which float32 attention on a GPU takes) reshapes ``k^T`` to 3-D for ``bmm``. ``k`` is a
``(B, S, heads * d)`` projection viewed as ``(B, heads, d, S)``: not viewable as ``(B * heads,
d, S)``, so ATen's decomposition copies it (``clone(memory_format=contiguous_format)``), and
the copy is laid out ``(B, heads, d, S)``: each program reads ``d``-contiguous runs and writes
them ``S`` apart, a transposing copy. On the H200, BERT-base's float32 ``k^T`` copy took 37.7 us
a layer against 12 us for the same bytes copied straight (``gpu_kernel_profile.py --dtype
float32``, session 10, call 3); torch.compile's took 12.

``coalesce_transposed_copies(gm)`` rewrites such a clone, one whose last two dims are
transposed in memory (stride 1 on the second-to-last) and whose every use is a view read by
``mm``/``bmm``, into ``clone(x.transpose(-2, -1)).transpose(-2, -1)``: the same values, the
copy written in the order it reads, and the product reads a transposed operand, which cuBLAS
(and every BLAS) takes as it is. Only where the views still apply to the new strides (checked
on meta tensors); each decision is a line of ``CompiledGraph.linear_log``.
"""

from __future__ import annotations

import torch
from torch import fx

from .mkldnn import _fake_meta, _meta_mode, _propagate_meta, _static_inputs, _val, copied_graph

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_PRODUCTS = (aten.mm.default, aten.bmm.default)


def _transposed_inner(val: object) -> bool:
    """A static tensor whose last two dims are transposed in memory."""
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return False
    if not all(isinstance(s, int) for s in (*val.shape, *val.stride())):
        return False
    rows, cols = val.shape[-2:]
    return rows > 1 and cols > 1 and val.stride(-2) == 1 and val.stride(-1) != 1


def _swapped_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` with its last two dims swapped, as seen
    through a transpose back to ``shape``."""
    swapped = (*shape[:-2], shape[-1], shape[-2])
    stride = list(torch.empty(swapped, device="meta").stride())
    stride[-2], stride[-1] = stride[-1], stride[-2]
    return tuple(stride)


def _why_not(clone: fx.Node) -> str | None:
    if clone.kwargs.get("memory_format") is not torch.contiguous_format:
        return "not a contiguous copy"
    source = clone.args[0]
    if not isinstance(source, fx.Node) or not _transposed_inner(_val(source)):
        return "its input is not transposed in its last two dims"
    if not clone.users:
        return "unused"
    shape = tuple(_val(clone).shape)
    probe = torch.empty_strided(shape, _swapped_strides(shape), device="meta")
    for view in clone.users:
        if view.target not in _VIEWS or view.args[0] is not clone:
            return f"read by {view.target}, not only by views into a matrix multiply"
        if not view.users or any(u.target not in _PRODUCTS for u in view.users):
            return "a view of it is read by something other than a matrix multiply"
        try:
            probe.view(view.args[1])
        except RuntimeError:
            return "its view does not apply to the transposed layout"
    return None


def coalesce_transposed_copies(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` with each transposing copy into a matrix multiply's operand written in
    its read order (``gm`` itself when there is none), and the log of decisions (one line per
    transposing copy)."""
    clones = [
        n
        for n in gm.graph.nodes
        if n.target is aten.clone.default
        and isinstance(n.args[0], fx.Node)
        and _transposed_inner(_val(n.args[0]))
    ]
    reasons = {n: _why_not(n) for n in clones}
    log = [f"{n.name}: transposing copy kept ({why})" for n, why in reasons.items() if why]
    wanted = [n for n, why in reasons.items() if why is None]
    if not wanted:
        return gm, tuple(log)
    graph, copies = copied_graph(gm)
    if not _static_inputs(graph):
        return gm, (*log, *(f"{n.name}: transposing copy kept (symbolic sizes)" for n in wanted))
    mode, propagated = _meta_mode(graph)  # one fake mode for every value the pass makes or reads
    for clone in (copies[n] for n in wanted):
        rank = _val(clone).dim()
        with graph.inserting_before(clone):
            flipped = graph.call_function(aten.transpose.int, (clone.args[0], rank - 2, rank - 1))
            _fake_meta(flipped)
            copy = graph.call_function(
                aten.clone.default, (flipped,), {"memory_format": torch.contiguous_format}
            )
            _fake_meta(copy)
            back = graph.call_function(aten.transpose.int, (copy, rank - 2, rank - 1))
            _fake_meta(back)
        clone.replace_all_uses_with(back)
        graph.erase_node(clone)
        log.append(
            f"{clone.name}: transposing copy of {tuple(_val(back).shape)} written in read "
            "order; the matrix multiply reads it transposed"
        )
    _propagate_meta(graph, mode, since=propagated)  # the views and products after each copy
    new_gm = fx.GraphModule(gm, graph)
    graph.lint()
    return new_gm, tuple(log)
