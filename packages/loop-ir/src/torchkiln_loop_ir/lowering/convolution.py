"""Small 2-D convolutions as pointwise loop IR: every output element sums its taps, unrolled.

``torchkiln::conv_direct(x, taps, stride, padding, dilation, groups)`` (made by channels_last.py
for depthwise convolutions of at most ``LoopIROptions.direct_convolution_taps`` taps) is lowered
here instead of calling cuDNN. The lowering takes any grouping (input channels per group times
the kernel's taps, unrolled); the pass sends it depthwise ones only.
``taps`` is the weight laid out ``(C_in per group, kh, kw, C_out)``, output channels innermost,
so a tap's weights for neighbouring channels are neighbouring in memory, as the input's are in
a channels-last activation.

Output element ``(n, co, oh, ow)`` of group ``g = co // (C_out / groups)`` is

    sum over ci < C_in/groups, i < kh, j < kw of
        x[n, g * C_in/groups + ci, oh * sh - ph + i * dh, ow * sw - pw + j * dw] * taps[ci, i, j, co]

in float32 (float64 for float64), a tap outside the input reading 0 (its coordinate is
checked, in 32-bit integers, only where some output element reaches past the edge). Being
pointwise, the sum fuses with what follows it, as a bias, a batch norm folded into it and an
activation: the convolution's result is never written on its own.
"""

from __future__ import annotations

import sympy
import torch

from ..errors import Unlowerable
from ..indexing import FloorDiv
from ..ir import Pointwise, compute_dtype
from ..ops import ops
from . import register_lowering
from .pointwise import operand_loader
from .pooling import _tap


def _reaches_past(out: int, size: int, stride: int, pad: int, dilation: int, tap: int):
    """(below, above): whether tap ``tap`` of some output element reads before the input's
    start, or past its end."""
    first = -pad + tap * dilation
    last = (out - 1) * stride - pad + tap * dilation
    return first < 0, last >= size


def conv_direct(ctx, x, taps, stride, padding, dilation, groups):
    size, tsize = x.get_size(), taps.get_size()
    if not all(isinstance(s, sympy.Integer) for s in (*size, *tsize)):
        raise Unlowerable("a direct convolution of symbolic sizes")
    _n, cin, h_in, w_in = (int(s) for s in size)
    cin_g, kh, kw, cout = (int(s) for s in tsize)
    if cin != cin_g * groups or cout % groups:
        raise Unlowerable(f"{cin} input channels in {groups} groups of {cin_g}")
    cout_g = cout // groups
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    out_size = ctx.out_size
    oh_n, ow_n = int(out_size[2]), int(out_size[3])
    acc = compute_dtype(ctx.out_dtype)
    # every input element is read by up to kh * kw output elements: an unrealized producer
    # (the expand convolution's bias, batch norm and SiLU before EfficientNet's depthwise one)
    # would be recomputed at each tap, its exp 25 times per element (session 16: B0's step
    # 4.8 -> 11.3 ms on the H200). Its buffer takes the layout it was traced with.
    x = ctx.graph.realize(x, "direct convolution input, read at every tap", ctx.node.args[0])
    load_x, load_w = operand_loader(x, acc), operand_loader(taps, acc)
    check_h = [any(_reaches_past(oh_n, h_in, sh, ph, dh, i)) for i in range(kh)]
    check_w = [any(_reaches_past(ow_n, w_in, sw, pw, dw, j)) for j in range(kw)]

    def inner(index):
        n, co, oh, ow = index
        first = (
            sympy.Integer(0)
            if groups == 1
            else (co if cout_g == 1 else FloorDiv(co, cout_g)) * cin_g
        )
        total = None
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kw):
                    h, w = oh * sh - ph + i * dh, ow * sw - pw + j * dw
                    v = _tap(
                        load_x,
                        [n, first + ci],
                        h,
                        w,
                        h_in,
                        w_in,
                        check_h[i],
                        check_w[j],
                        0.0,
                        torch.int32,  # fewer instructions per check than int64
                    )
                    term = ops.mul(
                        v, load_w([sympy.Integer(ci), sympy.Integer(i), sympy.Integer(j), co])
                    )
                    total = term if total is None else ops.add(total, term)
        return total

    return Pointwise(inner, out_size, ctx.out_dtype, ctx.device)


def _register() -> None:
    from ..channels_last import CONV_DIRECT

    register_lowering(CONV_DIRECT)(conv_direct)


_register()
