"""Reductions: sum, mean, prod, amax/amin, max/min.dim, argmax/argmin, any/all, var/std (two-pass).

A reduction becomes a realized ``ComputedBuffer`` holding a ``Reduction`` whose ranges are the
kept dims (size 1 where ``keepdim``) and whose reduction ranges are the reduced dims. Anything
computed from the reduced value (mean's division, std's sqrt) is a ``Pointwise`` on top of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..errors import Unlowerable
from ..ir import ComputedBuffer, IRNode, Pointwise, Reduction, compute_dtype, product
from ..ops import ops
from . import aten, register_lowering


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
    ranges = [sympy.Integer(1) if d in dims else size[d] for d in range(len(size))] if keepdim else [size[d] for d in kept]
    rranges = [size[d] for d in dims]

    def full_index(index, rindex):
        full: list[sympy.Expr] = [sympy.Integer(0)] * len(size)
        for pos, d in enumerate(kept):
            full[d] = index[d] if keepdim else index[pos]
        for j, d in enumerate(dims):
            full[d] = rindex[j]
        return full

    return tuple(ranges), tuple(rranges), full_index


def reduce(ctx: Any, x: IRNode, dims: Any, keepdim: bool, reduction_type: str, out_dtype: torch.dtype,
           src_dtype: torch.dtype, value_fn: Callable[..., Any] | None = None) -> ComputedBuffer:
    """Realize ``reduction_type`` of ``value_fn(load(x), full_index)`` over ``dims`` of ``x``."""
    dims = _dims(x, dims)
    ranges, rranges, full_index = _split(x, dims, keepdim)
    if not rranges or product(rranges) == 0:
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

    red = Reduction(inner_fn, ranges, rranges, reduction_type, out_dtype, src_dtype, x.get_device())
    return ctx.reduction(red)


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


@register_lowering(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim,
                   aten.all.dims)
def any_(ctx, x, dims=None, keepdim=False):
    if ctx.node.target._opname == "any":
        return reduce(ctx, x, dims, keepdim, "any", torch.bool, torch.bool)
    # all(x) == not any(not x)
    buf = reduce(ctx, x, dims, keepdim, "any", torch.bool, torch.bool, lambda v, _: ops.logical_not(v))
    return _pointwise_on(ctx, buf, lambda v: ops.logical_not(v), torch.bool)


def _var_parts(ctx, x, dims, correction, keepdim):
    """(variance, mean) as IR values, by two passes: mean, then the sum of squared deviations."""
    out = ctx.meta[0].dtype if isinstance(ctx.meta, (tuple, list)) else ctx.out_dtype
    cdt = compute_dtype(out)
    dims = _dims(x, dims)
    n = _count(x, dims)
    sum_buf = reduce(ctx, x, dims, True, "sum", cdt, cdt)
    mean_load = sum_buf.make_loader()
    kept_size = sum_buf.get_size()

    def mean_at(full):
        idx = [sympy.Integer(0) if s == 1 else i for i, s in zip(full, kept_size)]
        return ops.truediv(mean_load(idx), ops.index_expr(n, cdt))

    def sq_dev(v, full):
        d = ops.sub(v, mean_at(full))
        return ops.mul(d, d)

    m2 = reduce(ctx, x, dims, keepdim, "sum", cdt, cdt, sq_dev)
    corr = 1 if correction is None else correction
    m2_load = m2.make_loader()

    def var_fn(idx):
        denom = ops.sub(ops.index_expr(n, cdt), ops.constant(float(corr), cdt))
        return ops.truediv(m2_load(idx), ops.maximum(denom, ops.constant(0.0, cdt)))

    var = Pointwise(var_fn, m2.get_size(), out, x.get_device())
    full_size = x.get_size()

    def mean_fn(idx):
        if keepdim:
            return mean_at(list(idx))
        it = iter(idx)
        return mean_at([sympy.Integer(0) if d in dims else next(it) for d in range(len(full_size))])

    mean_pw = Pointwise(mean_fn, m2.get_size(), out, x.get_device())
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
    v = _var_parts(ctx, x, dims, correction, keepdim)[0]
    load = v.make_loader()
    return Pointwise(lambda idx: ops.sqrt(load(idx)), v.get_size(), v.get_dtype(), v.get_device())


@register_lowering(aten.var_mean.correction)
def var_mean(ctx, x, dims=None, *, correction=None, keepdim=False):
    return _var_parts(ctx, x, dims, correction, keepdim)

