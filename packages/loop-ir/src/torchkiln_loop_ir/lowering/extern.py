"""Named extern kernels: matrix multiplies, convolution and attention (forward and backward) and
the pooling backwards run as their ATen kernels (cuDNN/cuBLAS/oneDNN where ATen uses them).

Their inputs are realized (an extern kernel reads memory); the wrapper calls the ATen op.
"""

from __future__ import annotations

from . import aten, register_lowering

_EXTERN = [
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default,
    aten.convolution.default,
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
_EXTERN += [getattr(aten, name).default for name in (
    "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_cudnn_attention_backward",
) if hasattr(aten, name)]


def _register(op) -> None:
    @register_lowering(op)
    def lower(ctx, *args, **kwargs):
        return ctx.extern(op, args, kwargs, kind="extern", reason="named extern kernel")


for _op in _EXTERN:
    _register(_op)
