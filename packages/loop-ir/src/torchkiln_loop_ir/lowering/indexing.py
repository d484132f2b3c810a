"""Indexing with computed indices (indirect indexing): embedding, index.Tensor, gather, index_select.

A loaded index becomes an index symbol through ``ops.indirect_indexing`` after wrapping negative
values; the symbol is then used in the load of the indexed tensor. Scatter-style writes
(scatter, scatter_add, scatter_reduce(sum), index_put) copy their input into a fresh buffer and then
run a ``Scatter`` node that stores into it (overwrite, or atomic_add when accumulating); into an
extern kernel's result that nothing else reads, they store in place.
Boolean-mask *reads* (``x[mask]``, ``nonzero``) have a data-dependent output size and stay ATen
fallbacks, listed in ``fallbacks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ..errors import Unlowerable
from ..ir import (
    Buffer,
    ComputedBuffer,
    ExternKernel,
    IRNode,
    Pointwise,
    ReinterpretView,
    Scatter,
    compute_dtype,
)
from ..ops import ops
from . import aten, register_lowering
from .pointwise import broadcast_index, filled


def indirect(value: Any, size: sympy.Expr, *, wrap: bool = True) -> sympy.Symbol:
    """An index symbol for the integer ``value`` into a dim of ``size``. With ``wrap`` negatives
    count from the end (``x[idx]``, ``index_put``); without it (index_select, gather, scatter,
    embedding: eager raises for a negative index) a negative index fails the bounds check."""
    if size == 0:
        # every index is out of range and the tensor has no element a clamped index could read
        # (the kernels' bounds checks clamp to 0: a segfault here); ATen raises IndexError
        raise Unlowerable("indexing into a dim of size 0")
    if not wrap:
        return ops.indirect_indexing(value, size)
    zero = ops.constant(0, torch.int64)
    wrapped = ops.where(
        ops.lt(value, zero), ops.add(value, ops.index_expr(size, torch.int64)), value
    )
    return ops.indirect_indexing(wrapped, size)


def _checked_result(ctx, indices: IRNode, bound: sympy.Expr) -> Pointwise | None:
    """The result of index_select, embedding or gather when no kernel over it can check the
    indices: a result with no element (a dim of size 0 elsewhere: a kernel over no elements
    loads no index), or ``bound`` 0 (the indexed dim is empty: every index is out of range and
    there is no element a clamped index could read). Eager checks every index even then. A
    kernel over the indices checks each against ``bound`` and is kept though nobody reads its
    output (``GraphLowering.kept``); the result is zeros, which a failed check (always, for
    ``bound`` 0) never lets out: the graph raises and is replayed eagerly, with eager's error.
    With no index at all there is nothing to check: the result is empty then. None when a
    kernel over the result checks its indices itself."""
    if not any(s == 0 for s in ctx.out_size) and bound != 0:
        return None
    if all(s != 0 for s in indices.get_size()):

        def check(index):
            # ops.indirect_indexing itself, not ``indirect``: a dim of size 0 is checked too,
            # the symbol indexing no memory
            i = ops.indirect_indexing(_load_int(indices, index), bound)
            return ops.index_expr(i, torch.int64)

        checked = ctx.graph.realize(
            Pointwise(check, indices.get_size(), torch.int64, ctx.device),
            "indices no kernel over the result checks, computed for their checks",
            ctx.node,
        )
        ctx.graph.kept.append(checked.name)
    return filled(0, ctx.out_size, ctx.out_dtype, ctx.device)


def _dim_size(x: IRNode, dim: int) -> sympy.Expr:
    """The size of ``x``'s dim ``dim`` (1 for a 0-d tensor, whose one valid index is 0)."""
    size = x.get_size()
    return size[dim] if size else sympy.Integer(1)


def _load_int(x: IRNode, index) -> Any:
    v = x.make_loader()(broadcast_index(index, x.get_size()))
    return v if x.get_dtype() == torch.int64 else ops.to_dtype(v, torch.int64, x.get_dtype())


@register_lowering(aten.embedding.default)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if (empty := _checked_result(ctx, indices, weight.get_size()[0])) is not None:
        return empty
    load_w = weight.make_loader()
    nidx = len(indices.get_size())
    rows = weight.get_size()[0]

    def inner_fn(index):
        i = indirect(_load_int(indices, index[:nidx]), rows, wrap=False)
        return load_w([i, index[-1]])

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.index.Tensor)
def index(ctx, x, indices):
    size = x.get_size()
    present = [d for d, t in enumerate(indices) if t is not None]
    if any(indices[d].get_dtype() in (torch.bool, torch.uint8) for d in present):
        raise Unlowerable("boolean mask indexing (data-dependent shape)")
    tensors = [indices[d] for d in present]
    if any(size[d] == 0 for d in present) or any(s == 0 for s in ctx.out_size):
        # decided here, not when a kernel's body is recorded (``indirect`` raises there)
        if len(tensors) != 1:
            raise Unlowerable("advanced indexing with an empty result or into a dim of size 0")
        return _checked_result(ctx, tensors[0], size[present[0]])
    # the index tensors broadcast to a shape of the most dims among them (its sizes are the
    # output's, already worked out; each tensor is read through broadcast_index): only the count
    # matters here, so dynamic sizes need no int()
    nb = max(len(t.get_size()) for t in tensors)
    consecutive = present == list(range(present[0], present[-1] + 1))
    load_x = x.make_loader()

    def inner_fn(out_index):
        out_index = list(out_index)
        if consecutive:
            first = present[0]
            bidx = out_index[first : first + nb]
            rest = out_index[:first] + out_index[first + nb :]
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
    # the result is idx's shape: an empty one has no index to check
    if (empty := _checked_result(ctx, idx, _dim_size(x, dim))) is not None:
        return empty
    load_x = x.make_loader()

    def inner_fn(index):
        full = list(index)
        full[dim] = indirect(_load_int(idx, index), x.get_size()[dim], wrap=False)
        return load_x(full)

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.index_select.default)
def index_select(ctx, x, dim, idx):
    n = len(x.get_size())
    dim = dim % n if n else 0
    if (empty := _checked_result(ctx, idx, _dim_size(x, dim))) is not None:
        return empty
    load_x = x.make_loader()

    def inner_fn(index):
        full = list(index)
        full[dim] = indirect(_load_int(idx, [index[dim]]), x.get_size()[dim], wrap=False)
        return load_x(full)

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


#: extern kernels whose result is a new tensor (never a view of an argument)
_FRESH_RESULT = (
    aten.mm.default,
    aten.addmm.default,
    aten._addmm_activation.default,
    aten.bmm.default,
    aten.baddbmm.default,
)
_VIEWS = (aten.permute.default, aten.view.default, aten._unsafe_view.default, aten.t.default)


def _dead_extern_result(ctx, x) -> Buffer | None:
    """The buffer the scatter may store into in place of a copy of ``x``: the one result of an
    extern kernel (a matrix multiply) that ``x`` is, or views with the result's own layout,
    where nothing else reads it (each FX node on the way has one user). GPT-2's tied vocabulary
    weight gradient is such a product, seen through two transposes, with the token gradients
    scattered into it (``scatter_add_fold.py``); its copy moved 2 x 154 MB a training step."""
    base = x.base if isinstance(x, ReinterpretView) else x
    if type(base) is not Buffer or (x is not base and x.layout != base.layout):
        return None
    node = ctx.node.args[0] if ctx.node.args else None
    while isinstance(node, torch.fx.Node) and len(node.users) == 1 and node.target in _VIEWS:
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
        return None
    for made in reversed(ctx.graph.nodes):
        if isinstance(made, ExternKernel) and base in made.outputs:
            fresh = made.op in _FRESH_RESULT and made.origin == node.name
            return base if fresh and made.outputs == (base,) else None
    return None


def _scatter(ctx, x, ranges, scatter_fn, mode):
    """``(target, result)``: a fresh copy of ``x`` (or ``x`` itself, ``_dead_extern_result``)
    updated by a ``Scatter`` over ``ranges``, and the value the op returns. Over no element the
    scatter writes nothing and loads no index (eager's kernel does not run either): the copy
    alone. The callers refuse, here and not when the body is recorded, a non-empty scatter into
    a dim of size 0 (every index out of range: ATen raises).

    An accumulating scatter into 16-bit floats (no backend has atomic adds for both) updates a
    float32 copy, and the result is that copy rounded back: each element's sum rounded once, as
    CUDA's sorted ``index_put_`` does (the CPU's rounds after each add; an embedding's gradient in
    a bfloat16 model ran as an ATen kernel before, fuzz seed 960250)."""
    dtype = x.get_dtype()
    wide = mode == "atomic_add" and dtype in (torch.float16, torch.bfloat16)
    store_dtype = torch.float32 if wide else dtype
    if not wide and (dead := _dead_extern_result(ctx, x)) is not None:
        # nothing reads it after the scatter: no copy (a tied embedding's weight gradient)
        target = dead
    else:
        target = ctx.graph.realize(
            Pointwise(x.make_loader(), x.get_size(), store_dtype, x.get_device()),
            "target of a scatter",
            ctx.node,
        )
    result = (
        Pointwise(target.make_loader(), x.get_size(), dtype, x.get_device()) if wide else target
    )
    if any(r == 0 for r in ranges):
        return target, result
    node = ComputedBuffer(
        ctx.graph.new_name(),
        target.layout,
        data=Scatter(scatter_fn, tuple(ranges), target.name, mode, store_dtype, x.get_device()),
        reason=f"scatter into {target.name}",
        origin=ctx.node.name,
    )
    ctx.graph.nodes.append(node)
    return target, result


def _check_atomic_dtype(dtype: torch.dtype) -> None:
    """Bool has no add. (16-bit floats accumulate in a float32 copy, ``_scatter``.)"""
    if dtype == torch.bool:
        raise Unlowerable(f"accumulating scatter into a {dtype} tensor (no atomic add)")


def _value_loader(value, dtype):
    from .pointwise import operand_loader

    return operand_loader(value, compute_dtype(dtype))


@register_lowering(
    aten.scatter_add.default, aten.scatter.src, aten.scatter.value, aten.scatter_reduce.two
)
def scatter(ctx, x, dim, index, src, reduce=None, *, include_self=True):
    """scatter (src and value forms), scatter_add and scatter_reduce(sum) as a ``Scatter`` node.

    Accumulating forms store with mode "atomic_add". Plain scatter overwrites: with duplicate
    indices eager leaves which write wins undefined, and so do we (results match eager where the
    indices along ``dim`` are unique).
    """
    n = len(x.get_size())
    dim = dim % n if n else 0
    target_op = ctx.node.target
    if target_op is aten.scatter_reduce.two:
        if reduce != "sum" or not include_self:
            raise Unlowerable(f"scatter_reduce with reduce={reduce!r}, include_self={include_self}")
        mode = "atomic_add"
    else:
        mode = "atomic_add" if target_op is aten.scatter_add.default else None
    if mode == "atomic_add":
        _check_atomic_dtype(x.get_dtype())
    if n and x.get_size()[dim] == 0:
        if all(s != 0 for s in index.get_size()):
            raise Unlowerable("scatter into a dim of size 0")
        return _scatter(ctx, x, index.get_size(), None, mode)[1]  # over no element: the copy
    load_src = _value_loader(src, x.get_dtype())
    if mode is None and target_op is not aten.scatter_reduce.two and _one_per_row(x, index, dim):
        return _scatter_as_select(x, dim, index, load_src)
    layout_index = None

    def scatter_fn(idx):
        full = list(idx)
        if n:
            full[dim] = indirect(_load_int(index, idx), x.get_size()[dim], wrap=False)
        return layout_index(full), load_src(idx)

    target, result = _scatter(ctx, x, index.get_size(), scatter_fn, mode)
    layout_index = target.layout.index
    return result


def _one_per_row(x: IRNode, index: IRNode, dim: int) -> bool:
    """Whether ``index`` picks exactly one element of each row of ``x`` along ``dim`` (size 1
    there, the sizes of ``x`` elsewhere): the one-hot of a loss's backward."""
    xs, ix = x.get_size(), index.get_size()
    return (
        len(xs) == len(ix)
        and ix[dim] == 1
        and all(a == b for d, (a, b) in enumerate(zip(xs, ix)) if d != dim)
    )


def _scatter_as_select(x: IRNode, dim: int, index: IRNode, load_src) -> Pointwise:
    """A scatter of one element per row as a select: ``where(i_dim == index[row], src[row],
    x)``. A Pointwise, so it fuses into what reads it, where a ``Scatter`` would realize a
    full-size copy of ``x`` and store into it (cross-entropy's backward wrote, then read back, a
    dense one-hot the size of the logits: 1.6 GB for GPT-2 at 16 x 512 in float32). The index
    still goes through ``indirect``, so an index out of range fails as the scatter's would."""
    load_x = x.make_loader()
    size = x.get_size()[dim]

    def inner_fn(idx):
        row = list(idx)
        row[dim] = sympy.Integer(0)
        picked = indirect(_load_int(index, row), size, wrap=False)
        hit = ops.eq(ops.index_expr(idx[dim], torch.int64), ops.index_expr(picked, torch.int64))
        return ops.where(hit, load_src(row), load_x(idx))

    return Pointwise(inner_fn, x.get_size(), x.get_dtype(), x.get_device())


@register_lowering(aten.index_put.default)
def index_put(ctx, x, indices, values, accumulate=False):
    """index_put with integer index tensors on any dims (None for a sliced dim, as in
    ``x[:, idx] = v``), accumulating with atomic adds or overwriting (with duplicate indices the
    winner is unspecified, as in eager), and ``x[mask] = value`` as a ``where``.

    The iteration space is the shape of ``x[indices]`` (advanced indexing: the broadcast index
    shape replaces the indexed dims where they are adjacent, else it comes first)."""
    size = x.get_size()
    indices = list(indices)
    while indices and indices[-1] is None:
        indices.pop()
    present = [d for d, t in enumerate(indices) if t is not None]
    if not present:
        raise Unlowerable("index_put without index tensors")
    if any(indices[d].get_dtype() in (torch.bool, torch.uint8) for d in present):
        if len(present) != 1 or present[0] != 0 or len(indices) != 1:
            raise Unlowerable("index_put mixing boolean masks with other indices")
        return _masked_put(ctx, x, indices, values, accumulate)
    tensors = [indices[d] for d in present]
    bshape = _broadcast_sizes([t.get_size() for t in tensors])
    nb = len(bshape)
    consecutive = present == list(range(present[0], present[-1] + 1))
    rest = [d for d in range(len(size)) if d not in present]
    first = present[0] if consecutive else 0
    rest_sizes = [size[d] for d in rest]
    ranges = rest_sizes[:first] + bshape + rest_sizes[first:]
    if all(r != 0 for r in ranges) and any(size[d] == 0 for d in present):
        raise Unlowerable("index_put into a dim of size 0")
    load_v = _value_loader(values, x.get_dtype())
    layout_index = None

    def scatter_fn(idx):
        idx = list(idx)
        bidx = idx[first : first + nb]
        rest_idx = iter(idx[:first] + idx[first + nb :])
        loaded = iter([indirect(_load_int(t, bidx), size[d]) for d, t in zip(present, tensors)])
        full = [next(loaded) if d in present else next(rest_idx) for d in range(len(size))]
        return layout_index(full), load_v(idx)

    mode = "atomic_add" if accumulate else None
    if mode:
        _check_atomic_dtype(x.get_dtype())
    target, result = _scatter(ctx, x, ranges, scatter_fn, mode)
    layout_index = target.layout.index
    return result


def _broadcast_sizes(sizes: list[Sequence[sympy.Expr]]) -> list[sympy.Expr]:
    """The broadcast of index tensors' ``sizes``, sizes symbolic or not (a dynamic batch's
    ``s0``): per dim, counted from the right, the one size other than 1 (1 where all are 1).
    Two different sizes other than 1 would broadcast only under a guard that they are equal:
    refused."""
    rank = max(len(s) for s in sizes)
    out: list[sympy.Expr] = []
    for d in range(rank):
        seen = {sympy.sympify(s[len(s) - rank + d]) for s in sizes if len(s) - rank + d >= 0}
        seen.discard(sympy.Integer(1))
        if len(seen) > 1:
            raise Unlowerable(f"index tensors of sizes {sorted(map(str, seen))} in one dim")
        out.append(seen.pop() if seen else sympy.Integer(1))
    return out


def _masked_put(ctx, x, indices, values, accumulate):
    """``x[mask] = v`` with one boolean mask over x's leading dims and a one-element ``v``:
    ``where(mask, v, x)`` (any other boolean form has a data-dependent element order)."""
    if len(indices) != 1 or indices[0].get_dtype() != torch.bool:
        raise Unlowerable("index_put with several or uint8 boolean indices")
    mask = indices[0]
    msize = mask.get_size()
    if isinstance(values, IRNode) and any(s != 1 for s in values.get_size()):
        raise Unlowerable(
            "index_put of a boolean mask with more than one value (data-dependent order)"
        )
    if tuple(msize) != tuple(x.get_size()[: len(msize)]):
        raise Unlowerable("boolean index_put mask not covering x's leading dims")
    cdt = compute_dtype(x.get_dtype())
    load_x, load_m = x.make_loader(), mask.make_loader()
    if isinstance(values, IRNode):
        load_v = values.make_loader()
        vsrc = compute_dtype(values.get_dtype())
        nv = len(values.get_size())

        def value_at(index):
            v = load_v([sympy.Integer(0)] * nv)
            return v if vsrc == cdt else ops.to_dtype(v, cdt, vsrc)
    else:
        value_at = _value_loader(values, x.get_dtype())

    def inner_fn(index):
        old = load_x(index)
        new = value_at(index)
        if accumulate:
            new = ops.add(old, new) if cdt != torch.bool else ops.logical_or(old, new)
        return ops.where(load_m(list(index)[: len(msize)]), new, old)

    return Pointwise(inner_fn, x.get_size(), x.get_dtype(), x.get_device())
