"""Named extern kernels: matrix multiplies, convolution and attention run as their ATen kernels.

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
]


def _register(op) -> None:
    @register_lowering(op)
    def lower(ctx, *args, **kwargs):
        return ctx.extern(op, args, kwargs, kind="extern", reason="named extern kernel")


for _op in _EXTERN:
    _register(_op)
