"""Named extern kernels: matrix multiplies, convolution and attention (forward and backward) and
the pooling backwards run as their ATen kernels (cuDNN/cuBLAS/oneDNN where ATen uses them).

Their inputs are realized (an extern kernel reads memory); the wrapper calls the ATen op.
"""

from __future__ import annotations

import sympy

from ..ir import IRNode, Pointwise
from ..ops import ops
from . import aten, register_lowering

_EXTERN = [
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_cudnn_attention.default,
    # backward of the ops above, and of pooling: library kernels, as in eager
    aten.convolution_backward.default,
    aten.max_pool2d_with_indices_backward.default,
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
    _register(_op)


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
