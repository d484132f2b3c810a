"""Random ops (rand, randn, bernoulli, native_dropout) from per-call seeds.

Each random op of a graph takes one int64 seed from a seed buffer the wrapper fills on every call
(an extern ``aten.randint`` step using torch's global generator, so ``torch.manual_seed`` makes
runs repeatable); the value at an element is ``ops.rand(seed, offset)`` with ``offset`` its flat
index. Counter-based generators make the value a pure function of (seed, offset): an inlined
random value read by two consumers is the same in both.
"""

from __future__ import annotations

import sympy
import torch

from ..errors import Unlowerable
from ..ir import IRNode, Pointwise, compute_dtype, contiguous_strides, is_low_precision
from ..ops import ops
from . import aten, register_lowering
from .pointwise import operand_loader

_BELOW_ONE = {torch.float16: 1 - 2**-11, torch.bfloat16: 1 - 2**-8}  # the largest value < 1


def random_pointwise(ctx, kind: str, size, dtype: torch.dtype, device) -> Pointwise:
    """Uniform [0, 1) (``kind="rand"``) or standard normal (``"randn"``) values of ``size``."""
    name, k = ctx.graph.next_seed(device)
    strides = contiguous_strides(size)
    cdt = compute_dtype(dtype)
    if not cdt.is_floating_point:
        raise Unlowerable(f"{kind} of dtype {dtype}")

    def inner_fn(index):
        seed = ops.load_seed(name, sympy.Integer(k))
        flat = sum((i * s for i, s, n in zip(index, strides, size) if n != 1), sympy.Integer(0))
        v = getattr(ops, kind)(seed, ops.index_expr(flat, torch.int64))
        if kind == "rand" and dtype in _BELOW_ONE:
            # float32 values just under 1 round up to 1.0 in 16 bits; eager's [0, 1) excludes it
            v = ops.minimum(v, ops.constant(_BELOW_ONE[dtype], torch.float32))
        if is_low_precision(dtype):
            # Rounded to its dtype here, once, as eager's stored 16-bit draw is: a consumer that
            # inlines the draw (``rand_like(x) < p``) then compares the value a consumer loading
            # the stored buffer sees, so a mask and the output it gates agree at the threshold.
            v = ops.to_dtype(ops.to_dtype(v, dtype, torch.float32), torch.float32, dtype)
        return v if cdt == torch.float32 else ops.to_dtype(v, cdt, torch.float32)

    return Pointwise(inner_fn, tuple(size), dtype, device)


@register_lowering(
    aten.rand.default, aten.rand_like.default, aten.randn.default, aten.randn_like.default
)
def rand(ctx, *args, **kwargs):
    kind = "randn" if ctx.node.target._opname.startswith("randn") else "rand"
    return random_pointwise(ctx, kind, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.bernoulli.p, aten.bernoulli.default)
def bernoulli(ctx, x, p=None, *, generator=None):
    if generator is not None:
        raise Unlowerable("bernoulli with an explicit generator")
    u = random_pointwise(ctx, "rand", ctx.out_size, torch.float32, ctx.device).inner_fn
    prob = operand_loader(x if p is None else p, torch.float32)
    cdt = compute_dtype(ctx.out_dtype)

    def inner_fn(index):
        keep = ops.lt(u(index), prob(index))
        return ops.to_dtype(keep, cdt, torch.bool)

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)


@register_lowering(aten.native_dropout.default)
def native_dropout(ctx, x, p, train):
    if train is False:
        raise Unlowerable("native_dropout outside training")
    size = x.get_size()
    u = random_pointwise(ctx, "rand", size, torch.float32, x.get_device()).inner_fn
    load = operand_loader(x, compute_dtype(x.get_dtype()))
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    cdt = compute_dtype(x.get_dtype())

    def keep(index):
        return ops.lt(u(index), ops.constant(1.0 - p, torch.float32))

    def out_fn(index):
        return ops.where(
            keep(index), ops.mul(load(index), ops.constant(scale, cdt)), ops.constant(0.0, cdt)
        )

    assert isinstance(x, IRNode)
    return (
        Pointwise(out_fn, size, x.get_dtype(), x.get_device()),
        Pointwise(keep, size, torch.bool, x.get_device()),
    )
