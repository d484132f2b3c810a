"""Named extern kernels: matrix multiplies, convolution and attention (forward and backward) and
the pooling backwards run as their ATen kernels (cuDNN/cuBLAS/oneDNN where ATen uses them).

Their inputs are realized (an extern kernel reads memory); the wrapper calls the ATen op.
"""

from __future__ import annotations

import sympy
import torch

from ..ir import IRNode, Pointwise
from ..ops import ops
from . import aten, register_lowering

_EXTERN = [
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten._addmm_activation.default,  # a product and its activation (cublas_epilogues.py)
    aten.baddbmm.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_cudnn_attention.default,
    # backward of the ops above, and of pooling: library kernels, as in eager
    aten.convolution_backward.default,
    aten.avg_pool2d_backward.default,
]
# attention backwards exist in some torch builds only
_EXTERN += [
    getattr(aten, name).default
    for name in (
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_cudnn_attention_backward",
    )
    if hasattr(aten, name)
]

#: ops that read their tensor inputs from memory, however those were computed: a pointwise
#: value one of them reads is realized anyway (graph.py reads the buffer in its other
#: consumers too, rather than recomputing the value there)
READS_MEMORY = frozenset([*_EXTERN, aten.convolution.default])


def _register(op) -> None:
    @register_lowering(op)
    def lower(ctx, *args, **kwargs):
        return ctx.extern(op, args, kwargs, kind="extern", reason="named extern kernel")


for _op in _EXTERN:
    if _op is not aten.addmm.default:
        _register(_op)


@register_lowering(aten.addmm.default)
def addmm(ctx, *args, **kwargs):
    """``addmm`` as its ATen kernel; with ``LoopIROptions.addmm_bias_in_consumer``, where only
    generated code reads the result (``_bias_fuses``), ``mm`` with the bias added in pointwise
    code that those consumers inline."""
    op = aten.addmm.default
    node = ctx.node
    bias, a, b = args
    if (
        not ctx.graph.options.addmm_bias_in_consumer
        or kwargs.get("beta", 1) != 1
        or kwargs.get("alpha", 1) != 1
        or not isinstance(bias, IRNode)
        or not _bias_fuses(node)
    ):
        return ctx.extern(op, args, kwargs, kind="extern", reason="named extern kernel")
    from .pointwise import make_pointwise

    product = ctx.extern(
        aten.mm.default,
        (a, b),
        {},
        kind="extern",
        reason="named extern kernel (addmm's bias added in its consumer)",
        fx_args=((node.args[1], node.args[2]), {}),
    )
    return make_pointwise(ctx, lambda p, c: ops.add(p, c), [product, bias])


def _bias_fuses(node) -> bool:
    """Whether every consumer of the value of ``node`` (through views of it) is generated code (a
    pointwise or reduction lowering): none reads memory (an extern, a fallback), none is a graph
    output. Those consumers inline the bias add (two reads, one op: recomputed where it is read
    twice, ``inline_cost.py``), so it costs no pass of its own; an op reading memory would have
    the sum written out for it, one more pass than ``addmm``'s epilogue."""
    from . import LOWERINGS

    consumers = 0
    stack, seen = [node], {node}
    while stack:
        value = stack.pop()
        for user in value.users:
            if user in seen:
                continue
            seen.add(user)
            target = user.target
            if user.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
                return False  # a graph output, or a call we cannot see into
            if target in READS_MEMORY:
                return False
            if target not in LOWERINGS and target.overloadpacket not in LOWERINGS:
                return False  # a fallback reads memory
            if target.is_view and user.args and user.args[0] is value:
                stack.append(user)
            else:
                consumers += 1
    return consumers > 0


@register_lowering(aten.convolution.default)
def convolution(ctx, x, weight, bias, *rest):
    op = aten.convolution.default
    if not isinstance(bias, IRNode) or ctx.device.type == "cpu":
        return ctx.extern(
            op, (x, weight, bias, *rest), {}, kind="extern", reason="named extern kernel"
        )
    # On GPUs ATen adds a convolution's bias in a kernel of its own after cuDNN's (one more pass
    # over the output): the bias is added in the pointwise code that reads the convolution
    # instead, where it fuses with what follows (a folded batch norm's bias, then relu: one
    # kernel). The sum is rounded to the output dtype as eager's add is.
    from .pointwise import make_pointwise

    node = ctx.node
    out = ctx.extern(
        op,
        (x, weight, None, *rest),
        {},
        kind="extern",
        reason="named extern kernel",
        fx_args=((node.args[0], node.args[1], None, *node.args[3:]), node.kwargs),
    )
    load = bias.make_loader()
    channels = (bias.get_size()[0],) + (sympy.Integer(1),) * (len(ctx.out_size) - 2)
    per_channel = Pointwise(
        lambda index: load([index[0]]), channels, bias.get_dtype(), bias.get_device()
    )
    return make_pointwise(ctx, lambda a, b: ops.add(a, b), [out, per_channel])
