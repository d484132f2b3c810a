"""A convolution backward's bias gradient as a sum loop-ir generates.

``aten.convolution_backward(..., output_mask=[.., .., True])`` computes the bias gradient with
ATen's reduction of the output gradient over every dim but the channels: a kernel of its own
that reads the whole gradient again. In ConvNeXt-tiny's bfloat16 training step at batch 64
(a bias on each of its 18 depthwise 7x7 convolutions, channels-last) those reductions took
0.93 ms of 17.1 ms of kernel time on an H100 (21 launches, about a tenth of the bandwidth;
``gpu_kernel_profile.py``, session 36), where a sum that loop-ir fuses into the kernel making
the gradient reads nothing more.

``split_bias_grads(gm)`` asks each such convolution backward for its input and weight gradients
only and computes the bias gradient as ``aten.sum.dim_IntList(grad_output, dims)``: in the
gradient's dtype, accumulated in float32 by loop-ir's lowering as by ATen's reduction (in
another order). Each change is a line of ``CompiledGraph.convolution_log``
(``LoopIROptions.generated_conv_bias_grads``: ``"auto"`` by default, on for graphs for a CUDA
device).

Measured (H100): alone, each sum is a kernel of its own (the gradient is realized anyway, for
the convolution backward that reads it), and session 36 saw no faster step (412 -> 433
launches). In ConvNeXt a layer norm follows each depthwise convolution: the sum is then a
column sum of the layer norm backward's input gradient, which ``mixed_order.py`` gives to that
kernel as a third partial (loop-ir 0.8.26), and the step got 5.3% faster (session 39,
``benchmarks/gpu_options_ab.py``, 18.87 -> 17.93 ms).
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from .mkldnn import copied_graph

aten = torch.ops.aten

_MASK = 10  # convolution_backward's output_mask argument


def _splittable(node: fx.Node) -> list[int] | None:
    """The dims the bias gradient of convolution backward ``node`` sums over, or None when
    it asks for none (or its output gradient's meta value is not known)."""
    if node.target is not aten.convolution_backward.default or len(node.args) <= _MASK:
        return None
    mask, grad = node.args[_MASK], node.args[0]
    if not isinstance(mask, (list, tuple)) or len(mask) != 3 or not mask[2]:
        return None
    value = grad.meta.get("val") if isinstance(grad, fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() < 3:
        return None
    if any(u.target is operator.getitem and "val" not in u.meta for u in node.users):
        return None
    return [0, *range(2, value.dim())]


def split_bias_grads(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` with each convolution backward's bias gradient a generated sum, and the
    log (module docstring); ``gm`` itself when there is none."""
    found = [(n, dims) for n in gm.graph.nodes if (dims := _splittable(n)) is not None]
    if not found:
        return gm, ()
    graph, copies = copied_graph(gm)
    log = []
    for old, dims in found:
        node = copies[old]
        grad = node.args[0]
        for use in [u for u in node.users if u.target is operator.getitem and u.args[1] == 2]:
            with graph.inserting_before(use):
                total = graph.call_function(aten.sum.dim_IntList, (grad, dims))
            total.meta = dict(use.meta)
            use.replace_all_uses_with(total)
            graph.erase_node(use)
        mask = list(node.args[_MASK])
        mask[2] = False
        node.args = (*node.args[:_MASK], mask, *node.args[_MASK + 1 :])
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)) and len(val) == 3:
            node.meta["val"] = (val[0], val[1], None)
        log.append(f"{old.name}: its bias gradient is a generated sum over dims {dims}")
    graph.lint()
    return fx.GraphModule(gm, graph), tuple(log)
