"""Pooling: max_pool2d_with_indices as two pointwise nodes unrolled over the (small) window.

Each output element loads its window (out-of-bounds taps, from padding, read as -inf) and keeps
the first maximum, like ATen; the indices are flat ``h * W + w`` offsets into the input plane.
Its backward is a gather, pointwise over the input: each input element sums the output
gradients of the few windows that hold it whose index names it.
"""

from __future__ import annotations

import sympy
import torch

from ..errors import Unlowerable
from ..fx_sizes import to_expr
from ..indexing import FloorDiv
from ..ir import IRNode, Pointwise
from ..ops import ops
from . import aten, register_lowering

_MAX_WINDOW = 25  # taps unrolled per output element; larger windows fall back to ATen


def _pair(v, default):
    v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(x) for x in (v * 2 if len(v) == 1 else v)]


def _window(name: str, x, kernel_size, stride, padding):
    """(kh, kw, sh, sw, ph, pw, H, W) of a 2-D pooling window over ``x``, or Unlowerable."""
    kh, kw = _pair(kernel_size, None)
    sh, sw = _pair(stride, [kh, kw])
    ph, pw = _pair(padding, 0)
    if kh * kw > _MAX_WINDOW:
        raise Unlowerable(f"pooling window of {kh * kw} taps")
    size = x.get_size()
    if len(size) not in (3, 4):
        raise Unlowerable(f"{name} of a tensor that is not 3-D or 4-D")
    return kh, kw, sh, sw, ph, pw, size[-2], size[-1]


def _tap(
    load, lead, h, w, H, W, check_h: bool, check_w: bool, other: float, index_dtype=torch.int64
):
    """The input at (h, w), or ``other`` where a checked coordinate falls outside the input
    (checked in ``index_dtype``: a direct convolution uses int32, fewer instructions per check)."""
    if not (check_h or check_w):
        return load([*lead, h, w])
    conds = []
    for v, size, check in ((h, H, check_h), (w, W, check_w)):
        if check:
            iv = ops.index_expr(v, index_dtype)
            conds += [
                ops.ge(iv, ops.constant(0, index_dtype)),
                ops.lt(iv, ops.index_expr(size, index_dtype)),
            ]
    mask = conds[0]
    for c in conds[1:]:
        mask = ops.logical_and(mask, c)
    return ops.masked(mask, lambda: load([*lead, h, w]), other)


def walks_the_window(device: torch.device) -> bool:
    """Whether max pooling's index on ``device`` is eager's walk (GPUs: one select per tap)
    rather than worked out from the maximum (CPUs, ``best_index``). A function, so that tests
    run the GPU's form on the CPU."""
    return device.type != "cpu"


@register_lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(
    ctx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False
):
    kh, kw, sh, sw, ph, pw, H, W = _window("max_pool2d", x, kernel_size, stride, padding)
    dh, dw = _pair(dilation, 1)
    # through to_expr, as every other output size: a size the ShapeEnv proved to be 1 (a window
    # over a short dim under dynamic shapes) is 1, so a broadcasting reader reads it at index 0
    # (fuzz seed 33361: read at the output's index, ``pool(x) > x`` compared with the next
    # channel's maximum), and torch's FloorDiv is loop-ir's
    out_size = tuple(to_expr(s) for s in ctx.meta[0].shape)
    load = x.make_loader()
    walks = walks_the_window(x.get_device())
    # int64 checks and flat indices: with them in int32 ResNet-50's fused batch-norm + ReLU +
    # max-pool kernel took the same time on an H100 (0.231 ms against 0.223, session 36): it is
    # bound by its nine taps' loads, not by the index arithmetic
    i64 = torch.int64

    def taps(index):
        """(value, flat index) of each tap of output element ``index``'s window, in order."""
        *lead, oh, ow = index
        out = []
        for i in range(kh):
            for j in range(kw):
                h = oh * sh - ph + i * dh
                w = ow * sw - pw + j * dw
                v = _tap(
                    load,
                    lead,
                    h,
                    w,
                    H,
                    W,
                    bool(ph or ceil_mode),
                    bool(pw or ceil_mode),
                    float("-inf"),
                )
                out.append((v, ops.index_expr(h * W + w, i64)))
        return out

    def maximum(window):
        """The maximum of a window's taps: a NaN wins, as in eager (``v > best or isnan(v)``)."""
        m = window[0][0]
        for v, _ in window[1:]:
            m = ops.where(ops.logical_or(ops.gt(v, m), ops.isnan(v)), v, m)
        return m

    def best(index):
        return maximum(taps(index))

    def first_inside(o, stride: int, pad: int, dil: int, k: int):
        """The window's first tap at or after 0 along one dim (eager steps its start by the
        dilation until it is): a window over padding starts its walk there."""
        start = o * stride - pad
        at = ops.index_expr(start + (k - 1) * dil, i64)
        for t in reversed(range(k - 1)):
            if t * dil >= pad:  # never negative: the later taps are never the first inside
                at = ops.index_expr(start + t * dil, i64)
                continue
            tap = ops.index_expr(start + t * dil, i64)
            at = ops.where(ops.ge(tap, ops.constant(0, i64)), tap, at)
        return at

    def walk_start(index):
        """The index eager's walk starts from (its first tap inside the input on each dim,
        found before it reads any value), or None where the first tap is inside anyway. It
        stays the index where no value inside is above -inf: a window whose inside values are
        all -inf, or (with dilation) a window with no tap inside at all."""
        if not (ph or pw):
            return None
        *lead, oh, ow = index
        h0, w0 = first_inside(oh, sh, ph, dh, kh), first_inside(ow, sw, pw, dw, kw)
        return ops.add(ops.mul(h0, ops.index_expr(W, i64)), w0)

    def walked_index(index):
        """The index of eager's walk, ``take = v > best or isnan(v)``, one select per tap,
        from -inf at ``walk_start`` where the window has padding."""
        window = taps(index)
        start = walk_start(index)
        if start is None:
            m, at = window[0]
            rest = window[1:]
        else:
            m, at, rest = ops.constant(float("-inf"), x.get_dtype()), start, window
        for v, flat in rest:
            take = ops.logical_or(ops.gt(v, m), ops.isnan(v))
            m, at = ops.where(take, v, m), ops.where(take, flat, at)
        return at

    def best_index(index):
        """Where eager's walk ends, worked out from the maximum: the first tap equal to it,
        or, when it is NaN, the last NaN. One compare per select, not the walk's two: g++
        vectorizes no loop that selects an int64 index under an OR of two float compares
        (CPU, session 31, ``benchmarks/cpu_microbench.py``: 13.6 -> 1.7 ms). GPUs keep the
        walk (fewer instructions a tap; this form is not measured there)."""
        window = taps(index)
        m = maximum(window)
        first_equal = window[-1][1]
        for v, flat in reversed(window[:-1]):
            first_equal = ops.where(ops.eq(v, m), flat, first_equal)
        last_nan = window[0][1]
        for v, flat in window[1:]:
            last_nan = ops.where(ops.isnan(v), flat, last_nan)
        start = walk_start(index)
        if start is not None:  # a padding tap (-inf) may equal the maximum only when it is -inf
            inf = ops.constant(float("-inf"), x.get_dtype())
            first_equal = ops.where(ops.eq(m, inf), start, first_equal)
        return ops.where(ops.isnan(m), last_nan, first_equal)

    values = Pointwise(best, out_size, x.get_dtype(), x.get_device())
    index_fn = walked_index if walks else best_index
    indices = Pointwise(index_fn, out_size, torch.int64, x.get_device())
    return (ctx.realize(values, "max_pool2d values"), ctx.realize(indices, "max_pool2d indices"))


def _covering(i, pad: int, kernel: int, stride: int, size) -> list[tuple[sympy.Expr, list]]:
    """The output positions along one dim whose windows may hold input position ``i``, lowest
    first, each with the int32 checks it needs: the last is ``(i + pad) // stride`` (a
    non-negative numerator), and a window spans ``ceil(kernel / stride)`` of them. The last is
    never below 0 and, where ``kernel >= stride``, always reaches ``i``; the others may fall
    below 0 or short of ``i``; any may be past the end (``size``)."""
    i32 = torch.int32
    zero = ops.constant(0, i32)
    last = FloorDiv(i + pad, stride)
    out = []
    for k in reversed(range(-(-kernel // stride))):
        o = last - k
        ov = ops.index_expr(o, i32)
        conds = [ops.lt(ov, ops.index_expr(size, i32))]
        if k:
            conds.append(ops.ge(ov, zero))
        if k or kernel < stride:  # the window starting at o * stride - pad reaches i
            conds.append(ops.ge(ops.index_expr(o * stride - pad + kernel - 1 - i, i32), zero))
        out.append((o, conds))
    return out


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(
    ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    """Pointwise over the input: the sum, in ascending output order (eager's gather's), of the
    gradients of the outputs whose window holds the element and whose index is its own
    ``h * W + w``. Accumulates in float32 for 16-bit grads.

    ATen's kernel runs instead for dilated windows, and by default on CPUs
    (``LoopIROptions.max_pool_backward``): there its scatter took 2.2-4.0 ms where this gather
    took 7-13 (channels-last) and 11-22 ms (contiguous: a strided gather along the vector loop),
    for ResNet's stem (8 x 64 x 112 x 112 float32, 2 threads, three runs of session 35,
    ``benchmarks/cpu_pool_backward.py``). On an H100 the gather is 2.2-3.6x faster than ATen's
    kernel (bf16 and float32, both layouts)."""
    kh, kw, sh, sw, ph, pw, H, W = _window("max_pool2d_backward", x, kernel_size, stride, padding)
    choice = ctx.graph.options.max_pool_backward
    why = "LoopIROptions.max_pool_backward"
    if choice == "auto":
        choice, why = ("aten", "on a CPU") if x.get_device().type == "cpu" else ("generated", "")
    if _pair(dilation, 1) != [1, 1]:
        choice, why = "aten", "a dilated window"
    if choice == "aten" or not isinstance(indices, IRNode):
        return ctx.extern(
            aten.max_pool2d_with_indices_backward.default,
            (grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices),
            {},
            kind="extern",
            reason=f"max-pool backward as ATen's kernel ({why or 'indices not a tensor'})",
        )
    OH, OW = grad.get_size()[-2:]
    load_grad, load_index = grad.make_loader(), indices.make_loader()
    dtype = ctx.out_dtype
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    # coordinates and the plane offset in int32, fewer instructions than int64 (ATen's indices
    # are int64, compared after a cast), where the plane's offsets fit
    plane = H * W
    narrow = plane.is_number and int(plane) < 2**31
    offset_dtype = torch.int32 if narrow else torch.int64

    def inner(index):
        *lead, h, w = index
        own = ops.index_expr(h * W + w, offset_dtype)
        total = ops.constant(0.0, acc)
        for oh, h_conds in _covering(h, ph, kh, sh, OH):
            for ow, w_conds in _covering(w, pw, kw, sw, OW):
                conds = h_conds + w_conds
                mask = conds[0]
                for c in conds[1:]:
                    mask = ops.logical_and(mask, c)

                def tap(oh=oh, ow=ow):
                    g = load_grad([*lead, oh, ow])
                    g = ops.to_dtype(g, acc, dtype) if dtype != acc else g
                    at = load_index([*lead, oh, ow])
                    at = ops.to_dtype(at, offset_dtype, torch.int64) if narrow else at
                    return ops.where(ops.eq(at, own), g, ops.constant(0.0, acc))

                total = ops.add(total, ops.masked(mask, tap, 0.0))
        return total if acc == dtype else ops.to_dtype(total, dtype, acc)

    return Pointwise(inner, ctx.out_size, dtype, x.get_device())


@register_lowering(aten.avg_pool2d.default)
def avg_pool2d(
    ctx,
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """The window's sum over its divisor, as ATen counts it: the window clipped to the padded
    input (count_include_pad) or to the input itself, or ``divisor_override``."""
    kh, kw, sh, sw, ph, pw, H, W = _window("avg_pool2d", x, kernel_size, stride, padding)
    load = x.make_loader()
    dtype = ctx.out_dtype
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    i64 = torch.int64

    def clip(v, lo, hi):
        return ops.minimum(ops.maximum(v, lo), hi)

    def inner(index):
        *lead, oh, ow = index
        total = None
        for i in range(kh):
            for j in range(kw):
                h, w = oh * sh - ph + i, ow * sw - pw + j
                edge = bool(ph or pw or ceil_mode)
                v = _tap(load, lead, h, w, H, W, edge, edge, 0.0)
                v = ops.to_dtype(v, acc, x.get_dtype()) if x.get_dtype() != acc else v
                total = v if total is None else ops.add(total, v)
        if divisor_override:
            divisor = ops.constant(float(divisor_override), acc)
        elif not (ph or pw or ceil_mode):
            divisor = ops.constant(float(kh * kw), acc)
        else:
            h0, w0 = ops.index_expr(oh * sh - ph, i64), ops.index_expr(ow * sw - pw, i64)
            zero = ops.constant(0, i64)
            h1 = ops.minimum(ops.add(h0, ops.constant(kh, i64)), ops.index_expr(H + ph, i64))
            w1 = ops.minimum(ops.add(w0, ops.constant(kw, i64)), ops.index_expr(W + pw, i64))
            if not count_include_pad:
                h0, w0 = ops.maximum(h0, zero), ops.maximum(w0, zero)
                h1 = clip(h1, zero, ops.index_expr(H, i64))
                w1 = clip(w1, zero, ops.index_expr(W, i64))
            count = ops.mul(ops.sub(h1, h0), ops.sub(w1, w0))
            divisor = ops.to_dtype(count, acc, i64)
        out = ops.truediv(total, divisor)
        return out if acc == dtype else ops.to_dtype(out, dtype, acc)

    return Pointwise(inner, ctx.out_size, dtype, x.get_device())
