"""View ops: a view is a reindexing of its input, never a copy.

A view of a buffer (or of a view of one) is a ``ReinterpretView`` with a new strided layout when
the reindexing is affine; otherwise (reshape of a non-viewable layout, views of unrealized values)
it is a ``Pointwise`` whose loader reindexes into the input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy
import torch

from ..errors import Unlowerable
from ..indexing import FloorDiv, ModularIndexing, index_symbol
from ..ir import Buffer, FixedLayout, IRNode, Pointwise, ReinterpretView, contiguous_strides
from ..ops import ops
from . import aten, register_lowering

Reindex = Callable[[Sequence[sympy.Expr]], list[sympy.Expr]]


def _base_and_layout(x: IRNode) -> tuple[Buffer, FixedLayout] | None:
    if isinstance(x, ReinterpretView):
        return x.base, x.layout
    if isinstance(x, Buffer):
        return x, x.layout
    return None


def view_of(x: IRNode, size: Sequence[sympy.Expr], reindex: Reindex) -> IRNode:
    """``x`` seen with ``size``: element ``i`` of the view is element ``reindex(i)`` of ``x``."""
    size = tuple(sympy.sympify(s) for s in size)
    bl = _base_and_layout(x)
    if any(s == 0 for s in size):
        # no element: any reindexing is right, and a reshape's would divide by the zero size
        # (ModularIndexing(i, 1, 0) made fusion analysis fail: integer modulo by zero)
        if bl is not None:
            return ReinterpretView(
                bl[0], FixedLayout(bl[1].device, bl[1].dtype, size, contiguous_strides(size))
            )
        load, zeros = x.make_loader(), [sympy.Integer(0)] * len(x.get_size())
        return Pointwise(lambda index: load(zeros), size, x.get_dtype(), x.get_device())
    if bl is not None:
        base, layout = bl
        syms = [index_symbol("v", i) for i in range(len(size))]
        expr = sympy.expand(layout.index(reindex(syms)))
        offset = expr.subs({s: 0 for s in syms})
        strides = tuple(expr.coeff(s) if sz != 1 else sympy.Integer(0) for s, sz in zip(syms, size))
        rebuilt = offset + sum(
            (st * s for st, s, sz in zip(strides, syms, size) if sz != 1), sympy.Integer(0)
        )
        if sympy.expand(
            rebuilt - expr.subs({s: 0 for s, sz in zip(syms, size) if sz == 1})
        ) == 0 and not any(st.free_symbols & set(syms) for st in strides):
            strides = tuple(
                st if sz != 1 else cst
                for st, sz, cst in zip(strides, size, contiguous_strides(size))
            )
            return ReinterpretView(
                base, FixedLayout(layout.device, layout.dtype, size, strides, offset)
            )
    load = x.make_loader()
    return Pointwise(lambda index: load(reindex(index)), size, x.get_dtype(), x.get_device())


def _permuted_layout(x: IRNode, dims: Sequence[int], size: Sequence[sympy.Expr]) -> IRNode | None:
    """The permute of a stored tensor whose layout is all integers, or None: its strides taken
    in the new order, the layout ``view_of`` finds by expanding the index with sympy and reading
    the coefficients back (a size-1 dimension takes its contiguous stride there too). Permutes
    are most of a transformer's views, and the sympy round trip was a third of lowering it."""
    bl = _base_and_layout(x)
    if bl is None or type(bl[1]) is not FixedLayout:
        return None
    base, layout = bl
    size = tuple(sympy.sympify(s) for s in size)
    strides = tuple(sympy.sympify(s) for s in layout.stride)
    offset = sympy.sympify(layout.offset)
    if not all(isinstance(v, sympy.Integer) for v in (*size, *strides, offset)):
        return None
    if any(s == 0 for s in size):
        return None  # no element: view_of's own case
    new = tuple(
        strides[d] if sz != 1 else cst for d, sz, cst in zip(dims, size, contiguous_strides(size))
    )
    return ReinterpretView(base, FixedLayout(layout.device, layout.dtype, size, new, offset))


@register_lowering(aten.permute.default)
def permute(ctx, x, dims):
    dims = [d % len(x.get_size()) for d in dims]
    size = [x.get_size()[d] for d in dims]
    fast = _permuted_layout(x, dims, size)
    if fast is not None:
        return fast
    inv = [dims.index(i) for i in range(len(dims))]
    return view_of(x, size, lambda idx: [idx[inv[i]] for i in range(len(dims))])


@register_lowering(aten.transpose.int)
def transpose(ctx, x, d0, d1):
    n = len(x.get_size())
    dims = list(range(n))
    if n:
        dims[d0 % n], dims[d1 % n] = dims[d1 % n], dims[d0 % n]
    return permute(ctx, x, dims)


@register_lowering(aten.t.default)
def t(ctx, x):
    return transpose(ctx, x, 0, 1) if len(x.get_size()) == 2 else x


@register_lowering(aten.expand.default)
def expand(ctx, x, sizes, *, implicit=False):
    in_size = x.get_size()
    out = ctx.out_size
    lead = len(out) - len(in_size)

    def reindex(idx):
        return [
            sympy.Integer(0) if (s == 1 and o != 1) else i
            for i, s, o in zip(list(idx)[lead:], in_size, out[lead:])
        ]

    return view_of(x, out, reindex)


@register_lowering(aten.unsqueeze.default)
def unsqueeze(ctx, x, dim):
    dim = dim % (len(x.get_size()) + 1)
    return view_of(x, ctx.out_size, lambda idx: list(idx[:dim]) + list(idx[dim + 1 :]))


@register_lowering(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def squeeze(ctx, x, dims=None):
    in_size = x.get_size()
    n = len(in_size)
    if dims is None:
        dims = [d for d in range(n) if in_size[d] == 1]
    elif isinstance(dims, int):
        dims = [dims]
    dropped = {d % n for d in dims if in_size[d % n] == 1} if n else set()

    def reindex(idx):
        it = iter(idx)
        return [sympy.Integer(0) if d in dropped else next(it) for d in range(n)]

    return view_of(x, ctx.out_size, reindex)


_MAX = 2**62  # an end past this means "to the end" (Python's slice of sys.maxsize)


def slice_bound(value, size: sympy.Expr, default: sympy.Expr) -> sympy.Expr:
    """A slice bound as a position in ``[0, size]``: None is ``default``, negatives count from the end."""
    if value is None:
        return default
    value = sympy.sympify(value)
    if value.is_number:
        v = int(value)
        if v >= _MAX:
            return size
        if v < 0:
            value = size + v
            return sympy.Max(value, 0) if not value.is_number else sympy.Integer(max(int(value), 0))
        if size.is_number:
            return sympy.Integer(min(v, int(size)))
    return value


@register_lowering(aten.slice.Tensor)
def slice_(ctx, x, dim=0, start=None, end=None, step=1):
    n = len(x.get_size())
    dim = dim % n
    size = x.get_size()[dim]
    # as eager: a negative start counts from the end, then clamps into [0, size] (Mistral's
    # sliding-window cache keeps ``keys[:, :, -4095:]`` of 16 positions: from 0, not -4079);
    # with a symbolic size, Max(size - 5, 0) (``x[-5:]`` of a dim of 2 starts at 0, not -3)
    start = slice_bound(start, sympy.sympify(size), sympy.Integer(0))

    def reindex(idx):
        idx = list(idx)
        idx[dim] = start + step * idx[dim]
        return idx

    return view_of(x, ctx.out_size, reindex)


@register_lowering(aten.select.int)
def select(ctx, x, dim, index):
    n = len(x.get_size())
    dim = dim % n
    if isinstance(index, int) and index < 0:
        index = index + x.get_size()[dim]
    return view_of(
        x, ctx.out_size, lambda idx: list(idx[:dim]) + [sympy.sympify(index)] + list(idx[dim:])
    )


def _reshape_reindex(old: Sequence[sympy.Expr], new: Sequence[sympy.Expr]) -> Reindex:
    new_strides = contiguous_strides(new)
    old_strides = contiguous_strides(old)

    def reindex(idx):
        flat = sum((i * s for i, s, sz in zip(idx, new_strides, new) if sz != 1), sympy.Integer(0))
        out = []
        for d, (sz, st) in enumerate(zip(old, old_strides)):
            if sz == 1:
                out.append(sympy.Integer(0))
            elif d == 0:
                out.append(FloorDiv(flat, st))
            else:
                out.append(ModularIndexing(flat, st, sz))
        return out

    return reindex


@register_lowering(aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def view(ctx, x, sizes):
    new = ctx.out_size
    old = x.get_size()
    if tuple(new) == tuple(old):
        return x
    bl = _base_and_layout(x)
    if bl is not None:
        base, layout = bl
        if layout.is_contiguous() or (
            layout.offset != 0
            and all(
                sz == 1 or st == c
                for sz, st, c in zip(layout.size, layout.stride, contiguous_strides(layout.size))
            )
        ):
            return ReinterpretView(
                base,
                FixedLayout(
                    layout.device, layout.dtype, tuple(new), contiguous_strides(new), layout.offset
                ),
            )
        strides = _restride(layout, new)
        if strides is not None:
            return ReinterpretView(
                base, FixedLayout(layout.device, layout.dtype, tuple(new), strides, layout.offset)
            )
    return view_of(x, new, _reshape_reindex(old, new))


def _restride(layout: FixedLayout, new: Sequence[sympy.Expr]) -> tuple[sympy.Expr, ...] | None:
    """Strides for viewing ``layout`` as ``new`` without a copy, or None (static sizes only)."""
    try:
        size = [int(s) for s in layout.size]
        stride = [int(s) for s in layout.stride]
        new_int = [int(s) for s in new]
    except TypeError:
        return None
    try:
        t = torch.empty_strided(size, stride, device="meta").view(new_int)
    except RuntimeError:
        return None
    return tuple(sympy.Integer(s) for s in t.stride())


@register_lowering(aten.alias.default, aten.detach.default, aten.lift_fresh.default)
def alias(ctx, x):
    return x


@register_lowering(aten.clone.default)
def clone(ctx, x, *, memory_format=None):
    load = x.make_loader()
    return Pointwise(load, x.get_size(), x.get_dtype(), x.get_device())


@register_lowering(aten.cat.default)
def cat(ctx, tensors, dim=0):
    tensors = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0)]
    from ..ir import compute_dtype
    from .pointwise import filled, operand_loader

    if not tensors:  # every operand a legacy empty (0,): the result is empty too, nothing to read
        return filled(0, ctx.out_size, ctx.out_dtype, ctx.device)
    n = len(ctx.out_size)
    dim = dim % n

    cdt = compute_dtype(ctx.out_dtype)
    loaders = [operand_loader(t, cdt) for t in tensors]
    bounds = []
    start: sympy.Expr = sympy.Integer(0)
    for t in tensors:
        bounds.append((start, start + t.get_size()[dim]))
        start = start + t.get_size()[dim]

    def inner_fn(index):
        i = ops.index_expr(index[dim], torch.int64)
        result = None
        for load, (lo, hi) in zip(loaders, bounds):
            shifted = list(index)
            shifted[dim] = index[dim] - lo
            cond = ops.logical_and(
                ops.ge(i, ops.index_expr(lo, torch.int64)),
                ops.lt(i, ops.index_expr(hi, torch.int64)),
            )
            value = ops.masked(cond, lambda load=load, shifted=shifted: load(shifted), 0)
            result = value if result is None else ops.where(cond, value, result)
        return result

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.split.Tensor, aten.split_with_sizes.default)
def split(ctx, x, split_size, dim=0):
    n = len(x.get_size())
    dim = dim % n
    total = x.get_size()[dim]
    if isinstance(split_size, (int, sympy.Integer)):
        sizes, pos = [], 0
        while pos < int(total):
            sizes.append(min(int(split_size), int(total) - pos))
            pos += int(split_size)
    else:
        sizes = list(split_size)
    outs, start = [], 0
    for sz in sizes:

        def reindex(idx, start=start):
            idx = list(idx)
            idx[dim] = idx[dim] + start
            return idx

        size = list(x.get_size())
        size[dim] = sympy.sympify(sz)
        outs.append(view_of(x, size, reindex))
        start = start + sz
    return outs


@register_lowering(aten.unbind.int)
def unbind(ctx, x, dim=0):
    n = len(x.get_size())
    dim = dim % n
    size = list(x.get_size())
    del size[dim]
    return [
        view_of(x, size, lambda idx, k=k: list(idx[:dim]) + [sympy.Integer(k)] + list(idx[dim:]))
        for k in range(int(x.get_size()[dim]))
    ]


@register_lowering(aten.flip.default)
def flip(ctx, x, dims):
    """``torch.flip(x, dims)``: element ``i`` along each flipped dim is ``x``'s ``n - 1 - i``.
    A new tensor in eager (not a view), so a Pointwise its consumers read through (``prod``'s
    backward flips its cumulative products)."""
    size = x.get_size()
    flipped = {d % len(size) for d in dims} if size else set()
    load = x.make_loader()

    def inner_fn(index):
        return load([n - 1 - i if d in flipped else i for d, (i, n) in enumerate(zip(index, size))])

    return Pointwise(inner_fn, tuple(size), x.get_dtype(), x.get_device())


@register_lowering(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, x, pad, value=0):
    """``F.pad(x, pad, value=v)``: ``x`` shifted by the low pads, ``v`` outside it (a negative pad
    crops). transformers' causal-LM loss pads its shifted labels with ``ignore_index``."""
    from ..ir import compute_dtype
    from .pointwise import operand_loader

    in_size = x.get_size()
    n = len(in_size)
    if len(pad) % 2 or len(pad) // 2 > n:
        raise Unlowerable(f"constant_pad_nd with {len(pad)} pads for {n} dims")
    low = [sympy.Integer(0)] * n
    for k in range(len(pad) // 2):
        low[n - 1 - k] = sympy.sympify(pad[2 * k])
    padded = [d for d in range(n) if low[d] != 0 or ctx.out_size[d] != in_size[d]]
    cdt = compute_dtype(ctx.out_dtype)
    load, fill = operand_loader(x, cdt), operand_loader(value, cdt)

    def inner_fn(index):
        src = [i - lo for i, lo in zip(index, low)]
        inside = None
        for d in padded:
            i = ops.index_expr(src[d], torch.int64)
            c = ops.logical_and(
                ops.ge(i, ops.constant(0, torch.int64)),
                ops.lt(i, ops.index_expr(in_size[d], torch.int64)),
            )
            inside = c if inside is None else ops.logical_and(inside, c)
        if inside is None:
            return load(src)
        return ops.where(inside, ops.masked(inside, lambda: load(src), 0), fill(index))

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)
