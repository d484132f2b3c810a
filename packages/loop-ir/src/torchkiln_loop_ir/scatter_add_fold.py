"""A scatter into zeros added to a tensor, written as a scatter into the tensor.

A tied embedding's weight (BERT's, GPT-2's and T5's vocabulary) gets two gradients: the output
projection's, a matrix multiply, and the embedding's, which the decomposition of
``embedding_dense_backward`` writes as ``index_put(full(0), [ids], grads, accumulate=True)``.
The backward graph then adds them: it fills a (vocabulary, width) buffer with zeros, scatters
the token gradients into it, and adds it to the product into a third buffer, four passes over
a tensor of the vocabulary's size where the scatter touches only the rows of the tokens
(BERT-base in float32: 94 MB a pass; the fill and the add took 21 and 23 ms of a 1.6 s
training step on 2 CPU cores, ``benchmarks/cpu_kernel_times.py --model bert --size full
--batch 1``), and three such buffers live at once.

``fold_scatter_adds(gm)`` rewrites ``add(x, index_put(full(0), indices, values, True))`` (either
order) as ``index_put(x, indices, values, True)``: a copy of ``x`` with the values accumulated
into it, two passes and one buffer fewer. Only where the zeros and the scatter have no other
use and ``x``, the scatter and the sum agree in size, dtype and contiguous layout (the sum keeps
the strides it was traced with). The sums are associated differently: eager adds the token
gradients together first, then the product's; here each is added to the product's in turn,
the order of an accumulating scatter's duplicate indices being unspecified already. Each
rewrite is a line of ``CompiledGraph.linear_log``.
"""

from __future__ import annotations

import torch
from torch import fx

from .mkldnn import _val, copied_graph

aten = torch.ops.aten


def _zeros_scattered(node: object, add: fx.Node) -> bool:
    """``node`` is an accumulating ``index_put`` into ``full(0)`` read by ``add`` alone."""
    if not isinstance(node, fx.Node) or node.target is not aten.index_put.default:
        return False
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if accumulate is not True or set(node.users) != {add}:
        return False
    zeros = node.args[0]
    return (
        isinstance(zeros, fx.Node)
        and zeros.target is aten.full.default
        and zeros.args[1] == 0
        and len(zeros.users) == 1
    )


def _same_layout(*values: object) -> bool:
    first = values[0]
    return all(
        isinstance(v, torch.Tensor)
        and v.shape == first.shape  # type: ignore[union-attr]
        and v.dtype == first.dtype  # type: ignore[union-attr]
        and v.device == first.device  # type: ignore[union-attr]
        and v.is_contiguous()
        for v in values
    )


def fold_scatter_adds(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` with each such sum folded into its scatter, and one log line per fold
    (module docstring); ``gm`` itself when there is none."""
    found = []
    for add in gm.graph.nodes:
        if add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs:
            continue
        for scatter, other in (add.args, reversed(add.args)):
            if (
                _zeros_scattered(scatter, add)
                and isinstance(other, fx.Node)
                and _same_layout(_val(add), _val(scatter), _val(other))
            ):
                found.append((add, scatter, other))
                break
    if not found:
        return gm, ()
    graph, copies = copied_graph(gm)
    log = []
    for add, scatter, other in found:
        new_add, new_scatter = copies[add], copies[scatter]
        zeros = new_scatter.args[0]
        with graph.inserting_before(new_add):
            folded = graph.call_function(
                aten.index_put.default,
                (copies[other], new_scatter.args[1], new_scatter.args[2], True),
            )
        folded.meta = dict(new_add.meta)
        new_add.replace_all_uses_with(folded)
        graph.erase_node(new_add)
        graph.erase_node(new_scatter)
        graph.erase_node(zeros)  # type: ignore[arg-type]
        log.append(
            f"{add.name}: {scatter.name}'s scatter into zeros accumulates into {other.name} "
            "instead (no zero-filled buffer, no sum pass)"
        )
    graph.lint()
    return fx.GraphModule(gm, graph), tuple(log)
