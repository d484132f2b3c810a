"""``slice_scatter``: the functional inverse of a slice view, lowered as one pointwise select.

Functionalization writes ``x[..., a:b:k] = src`` as ``slice_scatter(x, src, dim, a, b, k)``, and the
backward of a slice (``slice_backward``: rotary embeddings' ``x[..., :d // 2]`` in Llama) is a
``slice_scatter`` into zeros. Element ``i`` of the result is ``src[(i[dim] - a) // k]`` where
``i[dim]`` is one of the slice's positions, else ``x[i]``: a ``Pointwise`` with a masked read of
``src``, never a copy followed by a write. (``select_scatter`` reaches loop-ir already decomposed
to the same shape of pointwise code by torch's table.)
"""

from __future__ import annotations

import sympy
import torch

from ..errors import Unlowerable
from ..indexing import FloorDiv
from ..ir import Pointwise, compute_dtype
from ..ops import ops
from . import aten, register_lowering
from .pointwise import operand_loader
from .views import slice_bound


@register_lowering(aten.slice_scatter.default)
def slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    size = tuple(ctx.out_size)
    n = len(size)
    dim = dim % n
    start = slice_bound(start, size[dim], sympy.Integer(0))
    end = slice_bound(end, size[dim], size[dim])
    if not isinstance(step, int) or step < 1:
        raise Unlowerable(f"slice_scatter with step {step!r}")
    if start.is_number and end.is_number and int(end) < int(start):
        end = start
    cdt = compute_dtype(ctx.out_dtype)
    load_x, load_src = operand_loader(x, cdt), operand_loader(src, cdt)
    index_dtype = torch.int64

    def inner_fn(index):
        i = ops.index_expr(index[dim], index_dtype)
        inside = ops.logical_and(
            ops.ge(i, ops.index_expr(start, index_dtype)),
            ops.lt(i, ops.index_expr(end, index_dtype)),
        )
        if step != 1:
            offset = ops.sub(i, ops.index_expr(start, index_dtype))
            on_step = ops.eq(
                ops.remainder(offset, ops.constant(step, index_dtype)), ops.constant(0, index_dtype)
            )
            inside = ops.logical_and(inside, on_step)
        src_index = list(index)
        src_index[dim] = index[dim] - start if step == 1 else FloorDiv(index[dim] - start, step)
        picked = ops.masked(inside, lambda: load_src(src_index), 0)
        return ops.where(inside, picked, load_x(index))

    return Pointwise(inner_fn, size, ctx.out_dtype, ctx.device)
