"""Indexing with computed indices (indirect indexing): embedding, index.Tensor, gather, index_select.

A loaded index becomes an index symbol through ``ops.indirect_indexing`` after wrapping negative
values; the symbol is then used in the load of the indexed tensor. Scatter-style writes
(scatter, scatter_add, index_put) copy their input into a fresh buffer and then run a ``Scatter``
node that stores into it (overwrite, or atomic_add when accumulating).
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ..errors import Unlowerable
from ..ir import ComputedBuffer, IRNode, Pointwise, Scatter, compute_dtype
from ..ops import ops
from . import aten, register_lowering
from .pointwise import broadcast_index


def indirect(value: Any, size: sympy.Expr) -> sympy.Symbol:
    """An index symbol for the integer ``value`` into a dim of ``size`` (negatives wrap)."""
    zero = ops.constant(0, torch.int64)
    wrapped = ops.where(ops.lt(value, zero), ops.add(value, ops.index_expr(size, torch.int64)), value)
    return ops.indirect_indexing(wrapped, size)


def _load_int(x: IRNode, index) -> Any:
    v = x.make_loader()(broadcast_index(index, x.get_size()))
    return v if x.get_dtype() == torch.int64 else ops.to_dtype(v, torch.int64, x.get_dtype())


@register_lowering(aten.embedding.default)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    load_w = weight.make_loader()
    nidx = len(indices.get_size())
    rows = weight.get_size()[0]

    def inner_fn(index):
        i = indirect(_load_int(indices, index[:nidx]), rows)
        return load_w([i, index[-1]])

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.index.Tensor)
def index(ctx, x, indices):
    size = x.get_size()
    present = [d for d, t in enumerate(indices) if t is not None]
    if any(indices[d].get_dtype() in (torch.bool, torch.uint8) for d in present):
        raise Unlowerable("boolean mask indexing (data-dependent shape)")
    tensors = [indices[d] for d in present]
    bshape = torch.broadcast_shapes(*[tuple(int(s) for s in t.get_size()) for t in tensors])
    nb = len(bshape)
    consecutive = present == list(range(present[0], present[-1] + 1))
    load_x = x.make_loader()

    def inner_fn(out_index):
        out_index = list(out_index)
        if consecutive:
            first = present[0]
            bidx = out_index[first:first + nb]
            rest = out_index[:first] + out_index[first + nb:]
            rest_iter = iter(rest)
        else:
            bidx = out_index[:nb]
            rest_iter = iter(out_index[nb:])
        full = []
        k = 0
        for d in range(len(size)):
            if d in present:
                full.append(indirect(_load_int(tensors[k], bidx), size[d]))
                k += 1
            else:
                full.append(next(rest_iter))
        return load_x(full)

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.gather.default)
def gather(ctx, x, dim, idx, *, sparse_grad=False):
    n = len(x.get_size())
    dim = dim % n if n else 0
    load_x = x.make_loader()

    def inner_fn(index):
        full = list(index)
        full[dim] = indirect(_load_int(idx, index), x.get_size()[dim])
        return load_x(full)

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.index_select.default)
def index_select(ctx, x, dim, idx):
    n = len(x.get_size())
    dim = dim % n if n else 0
    load_x = x.make_loader()

    def inner_fn(index):
        full = list(index)
        full[dim] = indirect(_load_int(idx, [index[dim]]), x.get_size()[dim])
        return load_x(full)

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


def _scatter(ctx, x, ranges, scatter_fn, mode):
    """A fresh copy of ``x`` updated by a ``Scatter`` over ``ranges``; returns the copy."""
    load = x.make_loader()
    target = ctx.graph.realize(Pointwise(load, x.get_size(), x.get_dtype(), x.get_device()),
                               "target of a scatter", ctx.node)
    node = ComputedBuffer(ctx.graph.new_name(), target.layout,
                          data=Scatter(scatter_fn, tuple(ranges), target.name, mode, x.get_dtype(), x.get_device()),
                          reason=f"scatter into {target.name}", origin=ctx.node.name)
    ctx.graph.nodes.append(node)
    return target


def _value_loader(value, dtype):
    from .pointwise import operand_loader

    return operand_loader(value, compute_dtype(dtype))


@register_lowering(aten.scatter_add.default, aten.scatter.src, aten.scatter.value)
def scatter(ctx, x, dim, index, src):
    n = len(x.get_size())
    dim = dim % n if n else 0
    mode = "atomic_add" if ctx.node.target is aten.scatter_add.default else None
    if mode is None and n and index.get_size()[dim] != 1:
        # two writes can only collide along ``dim``; with duplicates plain scatter is
        # order-dependent, so keep ATen's behaviour
        raise Unlowerable("scatter without accumulation")
    load_src = _value_loader(src, x.get_dtype())
    layout_index = None

    def scatter_fn(idx):
        full = list(idx)
        full[dim] = indirect(_load_int(index, idx), x.get_size()[dim])
        return layout_index(full), load_src(idx)

    target = _scatter(ctx, x, index.get_size(), scatter_fn, mode)
    layout_index = target.layout.index
    return target


@register_lowering(aten.index_put.default)
def index_put(ctx, x, indices, values, accumulate=False):
    size = x.get_size()
    if not accumulate:
        raise Unlowerable("index_put without accumulation (order-dependent with duplicates)")
    if any(t is None for t in indices) or any(t.get_dtype() in (torch.bool, torch.uint8) for t in indices):
        raise Unlowerable("index_put with None or boolean indices")
    bshape = torch.broadcast_shapes(*[tuple(int(s) for s in t.get_size()) for t in indices])
    nb, k = len(bshape), len(indices)
    ranges = [sympy.Integer(s) for s in bshape] + list(size[k:])
    load_v = _value_loader(values, x.get_dtype())
    layout_index = None

    def scatter_fn(idx):
        idx = list(idx)
        full = [indirect(_load_int(t, idx[:nb]), size[d]) for d, t in enumerate(indices)] + idx[nb:]
        return layout_index(full), load_v(idx)

    target = _scatter(ctx, x, ranges, scatter_fn, "atomic_add")
    layout_index = target.layout.index
    return target
