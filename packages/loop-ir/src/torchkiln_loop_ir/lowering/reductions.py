"""Reductions: sum, mean, prod, amax/amin, max/min.dim, argmax/argmin, any/all, var/std/var_mean (one Welford pass).

A reduction becomes a realized ``ComputedBuffer`` holding a ``Reduction`` whose ranges are the
kept dims (size 1 where ``keepdim``) and whose reduction ranges are the reduced dims. Anything
computed from the reduced value (mean's division, std's sqrt) is a ``Pointwise`` on top of it.
A long reduction with too few outputs to fill the device runs as two (``split_reductions.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..errors import Unlowerable
from ..ir import ComputedBuffer, IRNode, Pointwise, Reduction, compute_dtype, product
from ..ops import ops
from . import aten, register_lowering
from .pointwise import filled
from .split_reductions import split_factor, split_reduction, split_welford, target_programs


def _dims(x: IRNode, dims: Any) -> list[int]:
    n = len(x.get_size())
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(n))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % n for d in dims}) if n else []


def _split(x: IRNode, dims: list[int], keepdim: bool):
    size = x.get_size()
    kept = [d for d in range(len(size)) if d not in dims]
    ranges = (
        [sympy.Integer(1) if d in dims else size[d] for d in range(len(size))]
        if keepdim
        else [size[d] for d in kept]
    )
    # a 0-d tensor reduces over its one element: a reduction range of 1 (rindex unused)
    rranges = [size[d] for d in dims] if size else [sympy.Integer(1)]

    def full_index(index, rindex):
        full: list[sympy.Expr] = [sympy.Integer(0)] * len(size)
        for pos, d in enumerate(kept):
            full[d] = index[d] if keepdim else index[pos]
        for j, d in enumerate(dims):
            full[d] = rindex[j]
        return full

    return tuple(ranges), tuple(rranges), full_index


def reduce(
    ctx: Any,
    x: IRNode,
    dims: Any,
    keepdim: bool,
    reduction_type: str,
    out_dtype: torch.dtype,
    src_dtype: torch.dtype,
    value_fn: Callable[..., Any] | None = None,
) -> ComputedBuffer:
    """Realize ``reduction_type`` of ``value_fn(load(x), full_index)`` over ``dims`` of ``x``."""
    dims = _dims(x, dims)
    ranges, rranges, full_index = _split(x, dims, keepdim)
    if rranges and product(rranges) == 0 and reduction_type in _EMPTY_IDENTITY:
        return filled(_EMPTY_IDENTITY[reduction_type], ranges, out_dtype, x.get_device())
    if not rranges or product(rranges) == 0:
        # max/min/argmax of nothing: eager raises, and the ATen kernel raises eager's error
        raise Unlowerable("empty reduction")
    load = x.make_loader()
    src = compute_dtype(x.get_dtype())
    want = compute_dtype(src_dtype)

    def inner_fn(index, rindex):
        full = full_index(index, rindex)
        v = load(full)
        if src != want:
            v = ops.to_dtype(v, want, src)
        return value_fn(v, full) if value_fn else v

    if reduction_type in _TRIVIAL_TYPES and product(rranges) == 1:
        return _one_element(inner_fn, ranges, rranges, out_dtype, want, x.get_device())
    red = Reduction(inner_fn, ranges, rranges, reduction_type, out_dtype, src_dtype, x.get_device())
    split = split_factor(red, target_programs(ctx, red.device))
    if split:
        return split_reduction(ctx, red, split)
    return ctx.reduction(red)


# A reduction over no element is the reduction's identity, as in eager (``x.sum(1)`` of a (3, 0)
# tensor is three zeros; ``all`` is ``not any(not x)``, so True); a constant Pointwise, no kernel
# of its own. max/min/argmax have no identity: eager raises, and so does the ATen fallback.
_EMPTY_IDENTITY = {"sum": 0, "xor_sum": 0, "prod": 1, "any": False}


# A reduction over one element is that element: a Pointwise the scheduler fuses with its
# neighbours (one kernel fewer), and a value computed once per kernel, so `x - x.mean(-1)` over a
# dimension of size 1 is exactly 0, as in eager, not the difference between two kernels' libm.
_TRIVIAL_TYPES = frozenset({"sum", "prod", "max", "min", "any"})


def _one_element(
    inner_fn, ranges, rranges, out_dtype: torch.dtype, value_dtype: torch.dtype, device
) -> Pointwise:
    zeros = [sympy.Integer(0)] * len(rranges)
    cdt = compute_dtype(out_dtype)

    def value(index):
        v = inner_fn(index, zeros)
        return v if value_dtype == cdt else ops.to_dtype(v, cdt, value_dtype)

    return Pointwise(value, ranges, out_dtype, device)


def _pointwise_on(ctx, buf: IRNode, fn: Callable[[Any], Any], dtype: torch.dtype) -> Pointwise:
    load = buf.make_loader()
    return Pointwise(lambda idx: fn(load(idx)), buf.get_size(), dtype, buf.get_device())


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def sum_(ctx, x, dims=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    buf = reduce(ctx, x, dims, keepdim, "sum", compute_dtype(out), out)
    return buf if compute_dtype(out) == out else _pointwise_on(ctx, buf, lambda v: v, out)


@register_lowering(aten.prod.dim_int, aten.prod.default)
def prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    buf = reduce(ctx, x, dim, keepdim, "prod", compute_dtype(out), out)
    return buf if compute_dtype(out) == out else _pointwise_on(ctx, buf, lambda v: v, out)


def _count(x: IRNode, dims: Any) -> sympy.Expr:
    size = x.get_size()
    return product([size[d] for d in _dims(x, dims)])


@register_lowering(aten.mean.dim, aten.mean.default)
def mean(ctx, x, dims=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    cdt = compute_dtype(out)
    buf = reduce(ctx, x, dims, keepdim, "sum", cdt, out)
    n = _count(x, dims)
    return _pointwise_on(ctx, buf, lambda v: ops.truediv(v, ops.index_expr(n, cdt)), out)


@register_lowering(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default)
def amax(ctx, x, dims=None, keepdim=False):
    kind = "max" if ctx.node.target._opname in ("amax", "max") else "min"
    return reduce(ctx, x, dims, keepdim, kind, ctx.out_dtype, ctx.out_dtype)


@register_lowering(aten.argmax.default, aten.argmin.default)
def argmax(ctx, x, dim=None, keepdim=False):
    kind = ctx.node.target._opname
    if dim is None:
        if keepdim:
            raise Unlowerable("argmax over all dims with keepdim")
        dims = list(range(len(x.get_size())))
    else:
        dims = [dim]
    return reduce(ctx, x, dims, keepdim, kind, torch.int64, x.get_dtype())


@register_lowering(aten.max.dim, aten.min.dim)
def max_dim(ctx, x, dim, keepdim=False):
    kind = ctx.node.target._opname
    values = reduce(ctx, x, [dim], keepdim, kind, x.get_dtype(), x.get_dtype())
    indices = reduce(ctx, x, [dim], keepdim, "arg" + kind, torch.int64, x.get_dtype())
    return values, indices


@register_lowering(
    aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims
)
def any_(ctx, x, dims=None, keepdim=False):
    if ctx.node.target._opname == "any":
        return reduce(ctx, x, dims, keepdim, "any", torch.bool, torch.bool)
    # all(x) == not any(not x)
    buf = reduce(
        ctx, x, dims, keepdim, "any", torch.bool, torch.bool, lambda v, _: ops.logical_not(v)
    )
    return _pointwise_on(ctx, buf, lambda v: ops.logical_not(v), torch.bool)


def _welford(ctx, x, dims, keepdim, cdt) -> tuple[ComputedBuffer, ComputedBuffer]:
    """(mean, m2) of ``x`` over ``dims`` in ``cdt``: two buffers of one ``welford_reduce`` (one
    pass once the scheduler fuses the siblings, which share every read). float32 values reduced
    in float64 are loaded as float32 (the code generator widens them as it accumulates)."""
    dims = _dims(x, dims)
    ranges, rranges, full_index = _split(x, dims, keepdim)
    if rranges and product(rranges) == 0:
        # nothing to reduce (a layer norm over an empty last dim): the mean is 0 / 0 and m2 0,
        # so the variance is 0 / 0 too, NaN both, as eager's; these ran as ATen fallbacks (13
        # of the CPU fuzzer's 1500 programs from seed 783000)
        device = x.get_device()
        return filled(float("nan"), ranges, cdt, device), filled(0.0, ranges, cdt, device)
    if not rranges:
        raise Unlowerable("empty reduction")
    load = x.make_loader()
    src = compute_dtype(x.get_dtype())

    widen = src == torch.float32 and cdt == torch.float64
    value_dt = src if widen else cdt

    def inner_fn(index, rindex):
        v = load(full_index(index, rindex))
        return v if src == value_dt else ops.to_dtype(v, value_dt, src)

    if product(rranges) == 1:  # mean is the element, m2 is 0
        mean = _one_element(inner_fn, ranges, rranges, cdt, value_dt, x.get_device())
        return mean, Pointwise(lambda index: ops.constant(0.0, cdt), ranges, cdt, x.get_device())
    red = Reduction(inner_fn, ranges, rranges, "welford_reduce", cdt, value_dt, x.get_device())
    split = split_factor(red, target_programs(ctx, red.device))
    if split:
        return split_welford(ctx, red, split)
    mean, m2 = (ctx.reduction(dataclasses.replace(red, output_index=i)) for i in (0, 1))
    return mean, m2


def _var_parts(ctx, x, dims, correction, keepdim, take_sqrt=False):
    """(variance, mean) as IR values, from one Welford pass (mean, m2): var = m2 / (n - correction).

    Welford's running update keeps float32 accurate where the mean is large against the spread
    (x = 1000 + randn), which the naive sum-of-squares formula is not. On the CPU, float32 rows
    accumulate in float64 as eager's CPU kernel does: m2 (n times the variance) overflows float32
    long before the variance does (1000 values of +-1e18: m2 1e39, variance 1e36). CUDA's eager
    accumulates float32 in float32, and so do we there.
    """
    out = ctx.meta[0].dtype if isinstance(ctx.meta, (tuple, list)) else ctx.out_dtype
    cdt = compute_dtype(out)
    wdt = torch.float64 if cdt == torch.float32 and x.get_device().type == "cpu" else cdt
    n = _count(x, dims)
    mean_buf, m2 = _welford(ctx, x, dims, keepdim, wdt)
    corr = 1 if correction is None else correction
    m2_load, mean_load = m2.make_loader(), mean_buf.make_loader()

    def narrow(v):
        return v if wdt == cdt else ops.to_dtype(v, cdt, wdt)

    def var_fn(idx):
        denom = ops.sub(ops.index_expr(n, wdt), ops.constant(float(corr), wdt))
        v = ops.truediv(m2_load(idx), ops.maximum(denom, ops.constant(0.0, wdt)))
        # std's sqrt before narrowing, as eager: a variance past float32's range can have a
        # standard deviation inside it
        return narrow(ops.sqrt(v) if take_sqrt else v)

    var = Pointwise(var_fn, m2.get_size(), out, x.get_device())
    mean_pw = Pointwise(lambda idx: narrow(mean_load(idx)), m2.get_size(), out, x.get_device())
    return var, mean_pw


@register_lowering(aten.var.correction, aten.var.dim)
def var(ctx, x, dims=None, *args, correction=None, keepdim=False, unbiased=None):
    if ctx.node.target is aten.var.dim:
        unbiased = args[0] if args else (True if unbiased is None else unbiased)
        keepdim = args[1] if len(args) > 1 else keepdim
        correction = 1 if unbiased else 0
    return _var_parts(ctx, x, dims, correction, keepdim)[0]


@register_lowering(aten.std.correction)
def std(ctx, x, dims=None, *, correction=None, keepdim=False):
    return _var_parts(ctx, x, dims, correction, keepdim, take_sqrt=True)[0]


@register_lowering(aten.var_mean.correction)
def var_mean(ctx, x, dims=None, *, correction=None, keepdim=False):
    return _var_parts(ctx, x, dims, correction, keepdim)


# cumsum as a triangular reduction: out[..., i, ...] = sum over j <= i of x[..., j, ...]. It does
# n^2/2 useless-looking work, but runs as an ordinary (fusable, parallel) reduction in both code
# generators without a scan IR; past _CUMSUM_MAX_N elements along the dim the quadratic cost is not
# worth it and the op runs as its ATen kernel. Position ids from an attention mask (HF models) are
# the case this is for.
_CUMSUM_MAX_N = 2048


@register_lowering(aten.cumsum.default)
def cumsum(ctx, x, dim, *, dtype=None):
    size = x.get_size()
    if not size:
        return _pointwise_on(
            ctx, x, lambda v: ops.to_dtype(v, ctx.out_dtype, x.get_dtype()), ctx.out_dtype
        )
    dim = dim % len(size)
    n = size[dim]
    if not n.is_Integer or int(n) > _CUMSUM_MAX_N:
        raise Unlowerable(f"cumsum over {n} elements (triangular form up to {_CUMSUM_MAX_N})")
    if int(n) == 0:
        raise Unlowerable("empty cumsum")
    out = ctx.out_dtype
    acc = value = compute_dtype(out)  # each value as the output's dtype (``dtype=``) first
    if out == torch.float32 and x.get_device().type == "cpu":
        # eager's CPU cumsum accumulates float32 in double (16-bit floats in float): so do we,
        # so that a row's cancellations (1e38 - 1e38) do not hang on the order the backend
        # sums the triangle in (codegen-cpp's vector lanes follow the host's ISA)
        acc = torch.float64
    load = x.make_loader()
    src = compute_dtype(x.get_dtype())

    def inner_fn(index, rindex):
        full = list(index)
        full[dim] = rindex[0]
        v = load(full)
        v = v if src == value else ops.to_dtype(v, value, src)
        v = v if value == acc else ops.to_dtype(v, acc, value)
        keep = ops.le(
            ops.index_expr(rindex[0], torch.int64), ops.index_expr(index[dim], torch.int64)
        )
        return ops.where(keep, v, ops.constant(0, acc))

    buf = ctx.reduction(Reduction(inner_fn, tuple(size), (n,), "sum", acc, acc, x.get_device()))
    return buf if acc == out else _pointwise_on(ctx, buf, lambda v: ops.to_dtype(v, out, acc), out)
