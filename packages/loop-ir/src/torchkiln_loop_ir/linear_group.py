"""Linear layers that read the same input, as one GEMM on the CPU (horizontal GEMM fusion).

Attention's query, key and value projections (BERT, DistilBERT, T5, Llama) and Llama's gate and
up projections are separate ``addmm``/``mm`` calls of one input with weights of the same input
width. ``group_linears(gm, mode)`` is a pass over the ATen graph before lowering (after the
convolution pass, before ``mkldnn_linear``'s) that replaces each such set with one
``torchkiln.linear_group(x, weights, biases, onednn)`` call, whose result holds the layers'
outputs side by side; each layer's result is a column slice of it (a view: the attention
reshapes and permutes that follow read it in place; meta values are propagated again, so the
kernels after it see the slice's strides, and graph outputs keep their traced strides).

One GEMM of width N1+N2+N3 costs less than three of N1, N2, N3: one call's fixed cost instead of
three, and the library's blocking works on a wider matrix (DistilBERT at sequence 128, batch 2:
three 256x128x128 ``addmm`` 445 us, one 256x128x384 296 us, one thread). The concatenated weight
(and bias) is built once and kept while every source tensor is unchanged (``_concatenated``:
keyed by each tensor's version counter and data pointer, so an updated parameter is seen on the
next call). The grouped GEMM itself is ``addmm`` or, where ``mkldnn_linear``'s measurement says
so for its shape, oneDNN with the concatenated weight prepacked.

Grouped: ``addmm``/``mm`` of the same input node whose weights are transposed float32 graph
inputs (``mkldnn_linear._linear_parts``), all with a bias or all without, not GPT-2's (in, out)
``Conv1D`` weights (GPT-2 already computes its projections in one). Each group's line is in the
log (``CompiledGraph.linear_log``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.weak import WeakIdKeyDictionary

from .mkldnn import (
    _LIB,
    _args_of,
    _fake_meta,
    _keep_output_layouts,
    _output_values,
    _propagate_meta,
    _static_inputs,
    _val,
    copied_graph,
    mkldnn_available,
)
from .mkldnn_linear import _MEASURE_MAX_FLOPS, _MEASURE_MIN_FLOPS, _linear_parts, _measured, _weight

aten = torch.ops.aten

_LIB.define("linear_group(Tensor x, Tensor[] weights, Tensor[] biases, bool onednn) -> Tensor")

#: first weight of a group -> (key, concatenated weight, concatenated bias or None)
_CONCATENATED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _concatenated(
    weights: list[torch.Tensor], biases: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The group's (sum of out, in) weight and its bias, rebuilt when any source changed."""
    key = tuple((id(t), t._version, t.data_ptr()) for t in (*weights, *biases))
    hit = _CONCATENATED.get(weights[0])
    if hit is not None and hit[0] == key:
        return hit[1], hit[2]
    with torch.no_grad():
        weight = torch.cat(weights)
        bias = torch.cat(biases) if biases else None
    _CONCATENATED[weights[0]] = (key, weight, bias)
    return weight, bias


def _linear_group(x, weights, biases, onednn):
    weight, bias = _concatenated(list(weights), list(biases))
    if onednn:
        packed = _weight(weight, x.shape[0], True, False)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return torch.addmm(bias, x, weight.t()) if bias is not None else torch.mm(x, weight.t())


def _linear_group_fake(x, weights, biases, onednn):
    return x.new_empty((x.shape[0], sum(w.shape[0] for w in weights)))


_LIB.impl("linear_group", _linear_group, "CPU")
torch.library.register_fake("torchkiln::linear_group", _linear_group_fake, lib=_LIB)

LINEAR_GROUP = torch.ops.torchkiln.linear_group.default
#: the wrapper calls this operator's CPU function directly (no dispatcher round trip)
DIRECT_CALLS = {LINEAR_GROUP: _linear_group}


def _source(x: fx.Node) -> Any:
    """What ``x`` reads: each layer of a 3-D input flattens it with a ``view`` of its own, so
    two views of one node to one shape are the same input."""
    if x.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        return (x.args[0], tuple(x.args[1]))
    return x


def _groups(graph: fx.Graph, placeholders: set[fx.Node]) -> list[list[tuple[fx.Node, Any, Any]]]:
    """Sets of two or more linear layers of one input: [(gemm, weight, bias), ...] each."""
    by_input: dict[tuple[Any, bool], list[tuple[fx.Node, Any, Any]]] = {}
    for node in graph.nodes:
        if node.target not in (aten.addmm.default, aten.mm.default):
            continue
        parts = _linear_parts(node, placeholders)
        if isinstance(parts, str) or parts[3]:  # not a linear, or a Conv1D weight
            continue
        x, w, b, _ = parts
        by_input.setdefault((_source(x), b is not None), []).append((node, w, b))
    return [g for g in by_input.values() if len(g) > 1]


def group_linears(
    gm: fx.GraphModule, mode: str = "measure"
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose linear layers of a shared input run as one GEMM each set, and the
    log (one line per set). ``mode`` is ``mkldnn_linear``'s: whether the grouped GEMM may be
    oneDNN's ("measure": where timing says it is faster, "always", "never")."""
    gemms = [n for n in gm.graph.nodes if n.target in (aten.addmm.default, aten.mm.default)]
    if len(gemms) < 2 or not _static_inputs(gm.graph):
        return gm, ()
    graph, _ = copied_graph(gm)
    mode_fake = FakeTensorMode()
    _propagate_meta(graph, mode_fake)
    propagated = _args_of(graph)
    placeholders = {n for n in graph.nodes if n.op == "placeholder"}
    groups = _groups(graph, placeholders)
    if not groups:
        return gm, ()
    output = next(n for n in graph.nodes if n.op == "output")
    before = _output_values(output)
    log = []
    for group in groups:
        first = group[0][0]
        x = _linear_parts(first, placeholders)[0]
        m, k = _val(x).shape
        widths = [_val(w).shape[0] for _, w, _ in group]
        n = sum(widths)
        has_bias = group[0][2] is not None
        flops = 2 * m * k * n
        onednn = (
            mode != "never"
            and mkldnn_available()
            and (
                mode == "always"
                or flops > _MEASURE_MAX_FLOPS
                or (flops >= _MEASURE_MIN_FLOPS and _measured(m, k, n, has_bias, "none")[0])
            )
        )
        with graph.inserting_before(first):
            new = graph.call_function(
                LINEAR_GROUP,
                (x, [w for _, w, _ in group], [b for _, _, b in group] if has_bias else [], onednn),
            )
            _fake_meta(new)
        start = 0
        for (gemm, _w, _b), width in zip(group, widths):
            with graph.inserting_before(gemm):
                part = graph.call_function(aten.slice.Tensor, (new, 1, start, start + width))
                _fake_meta(part)
            start += width
            transpose = gemm.args[-1]
            gemm.replace_all_uses_with(part)
            graph.erase_node(gemm)
            if not transpose.users:
                graph.erase_node(transpose)
        names = ", ".join(g.name for g, _, _ in group)
        log.append(
            f"{names}: one GEMM of their shared input ({len(group)} linears, {m}x{k}x"
            f"{'+'.join(map(str, widths))}, {'oneDNN' if onednn else 'addmm'})"
        )
    _propagate_meta(graph, mode_fake, since=propagated)
    if not _keep_output_layouts(graph, output, before):
        return gm, (
            "linears not grouped: a graph output that is not contiguous would change layout",
        )
    # the module is made once the graph is final: making it writes its Python code, as
    # recompile() does (once instead of twice)
    new_gm = fx.GraphModule(gm, graph)
    graph.lint()
    return new_gm, tuple(log)
