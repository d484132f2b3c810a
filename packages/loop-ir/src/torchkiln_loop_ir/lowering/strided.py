"""``as_strided`` and ``as_strided_``: a view defined on the storage, lowered as an index remap.

Element ``idx`` of ``x.as_strided(size, stride, offset)`` is storage element
``p = offset + sum(idx[d] * stride[d])`` of ``x``'s storage as *eager* laid it out (the FX node's
``meta["val"]``: strides and storage offset). Three ways to read ``p`` without an ATen call:

1. ``x`` is a graph input or a view of one: our buffer is the caller's tensor, so the result is a
   ``ReinterpretView`` of it at ``offset`` less the input's own storage offset.
2. ``x`` is dense in eager (its elements fill ``[x_offset, x_offset + numel)`` without gaps) and
   every ``p`` falls inside: ``p - x_offset`` names one element of ``x``. If our layout of ``x``
   has eager's strides, that element sits at the same distance from ``x``'s first element in our
   buffer: a ``ReinterpretView`` again.
3. Otherwise (``x`` unrealized, or laid out differently by us) the position is unravelled into
   ``x``'s index along eager's stride order and read through ``x``'s loader: a ``Pointwise``.

Reads outside what ``x`` covers (the rest of a larger storage) decline with a reason and run in
ATen. ``as_strided_scatter`` (below) is the write through such a view. ``as_strided_`` is the in-place form: make_fx records it raw when a decomposition runs below
functionalization (``adaptive_avg_pool2d`` of a channels-last input restrides its ``mean``); it is
the same view, as long as nothing reads the original node after the restride.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensor

from ..errors import Unlowerable
from ..graph import to_expr
from ..indexing import FloorDiv, ModularIndexing
from ..ir import Buffer, FixedLayout, InputBuffer, IRNode, Pointwise, ReinterpretView, compute_dtype
from ..ops import ops
from . import aten, register_lowering


def _ints(values: Sequence[sympy.Expr]) -> list[int] | None:
    try:
        return [int(v) for v in values]
    except TypeError:  # a symbolic size
        return None


def _eager_geometry(
    node: object,
) -> tuple[tuple[sympy.Expr, ...], tuple[sympy.Expr, ...], sympy.Expr]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise Unlowerable(
            "the input of as_strided has no traced value (its eager strides are unknown)"
        )
    return (
        tuple(to_expr(s) for s in val.shape),
        tuple(to_expr(s) for s in val.stride()),
        to_expr(val.storage_offset()),
    )


def _aliases(node: object) -> bool:
    """Whether the FX node's value is a view of (or an in-place result on) another tensor."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return _aliases(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _fresh_geometry(
    node: object,
) -> tuple[tuple[sympy.Expr, ...], tuple[sympy.Expr, ...], sympy.Expr]:
    """Eager's geometry of a computed value that owns its storage. A view's traced storage offset
    is not trustworthy (make_fx records real views as fresh fakes at offset 0): decline those."""
    if _aliases(node):
        raise Unlowerable(
            "as_strided of a view of a computed value (its storage offset in eager "
            "is not known here)"
        )
    size, stride, offset = _eager_geometry(node)
    if offset != 0:
        raise Unlowerable("a computed value that does not start its storage")
    return size, stride, offset


def _input_base(x: IRNode) -> InputBuffer | None:
    base = x.base if isinstance(x, ReinterpretView) else x
    return base if isinstance(base, InputBuffer) else None


def _placeholder_offset(ctx, buf: InputBuffer) -> sympy.Expr:
    """The storage offset of graph input ``buf`` (0 for a synthetic base). The example tensor's
    when it is real: make_fx fakifies a sliced input with offset 0 while the as_strided it records
    keeps the real one (capture's guards pin an input's storage offset)."""
    placeholders = [n for n in ctx.graph.gm.graph.nodes if n.op == "placeholder"]
    for pos, node in enumerate(placeholders):
        if node.name == buf.name:
            real = ctx.graph.example_inputs[pos] if pos < len(ctx.graph.example_inputs) else None
            if (
                isinstance(real, torch.Tensor)
                and not isinstance(real, FakeTensor)
                and real.device.type != "meta"
            ):
                return sympy.Integer(real.storage_offset())
            return _eager_geometry(node)[2]
    raise Unlowerable(f"graph input {buf.name} not found among the placeholders")


def _dense_order(size: Sequence[int], stride: Sequence[int]) -> list[int] | None:
    """Dims of size > 1 from the outermost stride to the innermost, if eager's layout is dense."""
    dims = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: stride[d])
    expected = 1
    for d in dims:
        if stride[d] != expected:
            return None
        expected *= size[d]
    return dims[::-1]


def _same_strides(
    layout: FixedLayout, size: Sequence[sympy.Expr], stride: Sequence[sympy.Expr]
) -> bool:
    return tuple(layout.size) == tuple(size) and all(
        sz == 1 or a == b for sz, a, b in zip(size, layout.stride, stride)
    )


def lower_as_strided(ctx, x: IRNode, size, stride, storage_offset=None) -> IRNode:
    size = tuple(sympy.sympify(s) for s in size)
    stride = tuple(sympy.sympify(s) for s in stride)
    device, dtype = x.get_device(), x.get_dtype()
    base = _input_base(x)
    if base is not None:  # 1. the caller's storage itself
        base_offset = _placeholder_offset(ctx, base)
        if storage_offset is None:
            if not isinstance(x, InputBuffer):
                raise Unlowerable("as_strided of a view of a graph input without a storage offset")
            storage_offset = base_offset
        relative = sympy.expand(sympy.sympify(storage_offset) - base_offset)
        if relative.is_number and relative < 0:
            raise Unlowerable("as_strided starts before the graph input's first element")
        return ReinterpretView(base, FixedLayout(device, dtype, size, stride, relative))

    x_size, x_stride, x_offset = _fresh_geometry(ctx.node.args[0])
    offset = sympy.sympify(storage_offset) if storage_offset is not None else x_offset

    sizes, strides = _ints(size), _ints(stride)
    xs, xst = _ints(x_size), _ints(x_stride)
    if None in (sizes, strides, xs, xst) or not offset.is_number or not x_offset.is_number:
        if (
            size == x_size
            and all(s == 1 or a == b for s, a, b in zip(size, stride, x_stride))
            and sympy.expand(offset - x_offset) == 0
        ):
            return x  # restrides to what it already is
        raise Unlowerable("as_strided of a computed value with symbolic sizes")
    if 0 in sizes:  # no element to read
        return Pointwise(lambda index: _zero(dtype), size, dtype, device)
    start = int(offset) - int(x_offset)
    order = _dense_order(xs, xst)
    if order is None:
        raise Unlowerable("as_strided of a computed value whose eager layout has gaps or overlaps")
    numel = 1
    for s in xs:
        numel *= s
    last = start + sum((s - 1) * st for s, st in zip(sizes, strides))
    if start < 0 or last >= numel:
        raise Unlowerable("as_strided reads storage outside the elements of its (computed) input")

    if isinstance(x, (Buffer, ReinterpretView)) and _same_strides(x.layout, x_size, x_stride):  # 2.
        owner = x.base if isinstance(x, ReinterpretView) else x
        return ReinterpretView(
            owner, FixedLayout(device, dtype, size, stride, x.layout.offset + start)
        )

    load = x.make_loader()  # 3. unravel the storage position along eager's stride order

    def inner_fn(index):
        flat = sympy.Integer(start) + sum(
            (i * st for i, st, sz in zip(index, stride, size) if sz != 1), sympy.Integer(0)
        )
        x_index: list[sympy.Expr] = [sympy.Integer(0)] * len(xs)
        for k, d in enumerate(order):
            x_index[d] = FloorDiv(flat, xst[d]) if k == 0 else ModularIndexing(flat, xst[d], xs[d])
        return load(x_index)

    return Pointwise(inner_fn, size, dtype, device)


def _zero(dtype: torch.dtype):
    return ops.constant(0, compute_dtype(dtype))


@register_lowering(aten.as_strided.default)
def as_strided(ctx, x, size, stride, storage_offset=None):
    return lower_as_strided(ctx, x, size, stride, storage_offset)


@register_lowering(aten.as_strided_.default)
def as_strided_(ctx, x, size, stride, storage_offset=None):
    source = ctx.node.args[0]
    if isinstance(source, torch.fx.Node):
        if source.op == "placeholder":
            raise Unlowerable(
                "as_strided_ changes a graph input's geometry in place; ATen does it on "
                "the caller's tensor"
            )
        order = {n: i for i, n in enumerate(ctx.node.graph.nodes)}
        later = [u.name for u in source.users if u is not ctx.node and order[u] > order[ctx.node]]
        if later:
            raise Unlowerable(
                f"{', '.join(later)} read {source.name} after as_strided_ restrided it "
                "in place (a functional view would give them the old geometry)"
            )
    return lower_as_strided(ctx, x, size, stride, storage_offset)


@register_lowering(aten.as_strided_scatter.default)
def as_strided_scatter(ctx, x, src, size, stride, storage_offset=None):
    """``x`` with the elements ``x.as_strided(size, stride, offset)`` would see replaced by ``src``:
    how functionalization writes back through an ``as_strided_`` (the training graph of
    convnext's channels-last pooling) or through a synthetic base of aliased inputs.

    Element ``j`` of the result sits at storage position ``p = x_offset + sum(j * x_stride)``
    (eager's geometry of ``x``). With the view's dims ordered by stride, outermost first, and no
    two view elements on one position, ``p - offset`` decomposes greedily into the one view index
    ``i`` that reads ``p``, if any: the result is ``src[i]`` there, ``x[j]`` elsewhere."""
    size = tuple(sympy.sympify(s) for s in size)
    stride = tuple(sympy.sympify(s) for s in stride)
    if isinstance(x, InputBuffer):
        x_size, x_stride, _ = _eager_geometry(ctx.node.args[0])
        x_offset = _placeholder_offset(ctx, x)
    elif _input_base(x) is not None:
        raise Unlowerable("as_strided_scatter into a view of a graph input")
    else:
        x_size, x_stride, x_offset = _fresh_geometry(ctx.node.args[0])
    offset = sympy.sympify(storage_offset) if storage_offset is not None else x_offset
    sizes, strides, xs, xst = _ints(size), _ints(stride), _ints(x_size), _ints(x_stride)
    if None in (sizes, strides, xs, xst) or not offset.is_number or not x_offset.is_number:
        raise Unlowerable("as_strided_scatter with symbolic sizes")
    if _dense_order(xs, xst) is None:
        raise Unlowerable(
            "as_strided_scatter into a tensor whose eager layout has gaps or overlaps"
        )
    order = _disjoint_order(sizes, strides)
    if order is None:
        raise Unlowerable("as_strided_scatter through a view whose elements overlap")
    start = int(x_offset) - int(offset)  # p - offset at x's element 0
    # Index functions are defined on non-negative integers only (the simplifier splits off
    # multiples, code generators divide like C): shift the position by a multiple ``shift`` of
    # the outermost stride so that it never goes below 0; the decomposition subtracts it back.
    outer = strides[order[0]] if order else 1
    shift = outer * -(-max(0, -start) // outer)
    base = sympy.Integer(start + shift)
    cdt = compute_dtype(ctx.out_dtype)
    load_x, load_src = x.make_loader(), src.make_loader()
    x_dtype, src_dtype = compute_dtype(x.get_dtype()), compute_dtype(src.get_dtype())

    def index_value(e):
        return ops.index_expr(e, torch.int64)

    def const(v):
        return ops.constant(v, torch.int64)

    def inner_fn(index):
        q = base + sum((j * st for j, st, sz in zip(index, xst, xs) if sz != 1), sympy.Integer(0))
        src_index: list[sympy.Expr] = [sympy.Integer(0)] * len(sizes)
        if not order:  # one element: the view's own position
            inside = ops.eq(index_value(q), const(shift))
        else:
            top = FloorDiv(q, outer)  # the outermost view index, plus shift // outer
            lo = shift // outer
            inside = ops.logical_and(
                ops.ge(index_value(top), const(lo)),
                ops.lt(index_value(top), const(lo + sizes[order[0]])),
            )
            src_index[order[0]] = top - lo
            rest = ModularIndexing(q, 1, outer)
            for d in order[1:]:  # greedy, outermost stride first
                src_index[d] = FloorDiv(rest, strides[d])
                inside = ops.logical_and(inside, ops.lt(index_value(src_index[d]), const(sizes[d])))
                rest = ModularIndexing(rest, 1, strides[d])
            inside = ops.logical_and(inside, ops.eq(index_value(rest), const(0)))
        picked = ops.masked(inside, lambda: _as(load_src(src_index), src_dtype, cdt), 0)
        return ops.where(inside, picked, _as(load_x(list(index)), x_dtype, cdt))

    return Pointwise(inner_fn, tuple(ctx.out_size), ctx.out_dtype, ctx.device)


def _disjoint_order(size: Sequence[int], stride: Sequence[int]) -> list[int] | None:
    """Dims of size > 1 outermost stride first, when no two indices reach one position (each
    stride passes the extent of the dims inside it); else None."""
    dims = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: stride[d])
    extent = 1
    for d in dims:
        if stride[d] < extent:
            return None
        extent = stride[d] * (size[d] - 1) + extent
    return dims[::-1]


def _as(value, dtype: torch.dtype, want: torch.dtype):
    return value if dtype == want else ops.to_dtype(value, want, dtype)
