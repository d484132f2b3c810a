"""Elementwise ATen ops: math with type promotion, comparisons, where/clamp, dtype casts, fills.

Values are computed in ``compute_dtype(out_dtype)`` (16-bit floats in float32); operands are cast
to that dtype first (comparisons and logical ops compute in their operands' promoted dtype).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from ..errors import Unlowerable
from ..float_sizes import FloatSizeExpr
from ..ir import Buffer, IRNode, Pointwise, ReinterpretView, compute_dtype, is_low_precision
from ..ops import OP_SPECS, ops
from . import aten, prims, register_lowering


def broadcast_index(index: Sequence[sympy.Expr], in_size: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    """The index into a tensor of ``in_size`` broadcast to an output indexed by ``index``."""
    tail = list(index)[len(index) - len(in_size) :] if in_size else []
    return [sympy.Integer(0) if s == 1 else i for i, s in zip(tail, in_size)]


def operand_loader(x: Any, dtype: torch.dtype) -> Callable[[Sequence[sympy.Expr]], Any]:
    """A loader giving ``x`` (IR, Python scalar or sympy expr) as a value of ``dtype``, broadcast."""
    if isinstance(x, IRNode):
        load, size, src = x.make_loader(), x.get_size(), compute_dtype(x.get_dtype())

        def inner(index):
            v = load(broadcast_index(index, size))
            return v if src == dtype else ops.to_dtype(v, dtype, src)

        return inner
    if isinstance(x, sympy.Expr) and not x.is_number:
        return lambda index: ops.index_expr(x, dtype)
    if isinstance(x, FloatSizeExpr):
        return lambda index: x.emit(dtype)
    if isinstance(x, sympy.Expr):
        x = int(x) if x.is_integer else float(x)
    if isinstance(x, bool) or dtype == torch.bool:
        value: Any = bool(x)
    elif dtype.is_floating_point:
        value = float(x)
    else:
        value = int(x)
    return lambda index: ops.constant(value, dtype)


def filled(value: Any, ranges: Any, out_dtype: torch.dtype, device: Any) -> Pointwise:
    """A tensor of ``ranges`` every element of which is ``value`` (also the result of an op whose
    output has no element: nothing is read)."""
    cdt = compute_dtype(out_dtype)
    return Pointwise(lambda index: ops.constant(value, cdt), ranges, out_dtype, device)


def lazy_op(name: str) -> Callable[..., Any]:
    """``ops.<name>`` looked up when called (the handler is only installed at that point)."""
    return lambda *args: getattr(ops, name)(*args)


def promoted_dtype(*xs: Any) -> torch.dtype:
    """torch's type promotion of the operands (IR values count as tensors of their rank)."""
    dummies = []
    for x in xs:
        if isinstance(x, IRNode):
            dummies.append(torch.empty((0,) * len(x.get_size()), dtype=x.get_dtype()))
        elif isinstance(x, sympy.Expr) and not x.is_number:
            # a size expression (``s0 - 4``): eager sees a SymInt, promoted as a Python int
            # (int() of it raises: ``x == s0 - 4`` ran as an ATen fallback, fuzz seed 783089)
            dummies.append(1)
        elif isinstance(x, sympy.Expr):
            dummies.append(int(x) if x.is_integer else float(x))
        elif isinstance(x, FloatSizeExpr):
            dummies.append(1.0)  # a Python float, as eager sees the SymFloat
        else:
            dummies.append(x)
    if len(dummies) == 1:
        d = dummies[0]
        return d.dtype if isinstance(d, torch.Tensor) else torch.tensor(d).dtype
    out = dummies[0]
    for d in dummies[1:]:
        dt = torch.result_type(out, d)
        out = (
            torch.empty((0,), dtype=dt)
            if isinstance(out, torch.Tensor) or isinstance(d, torch.Tensor)
            else torch.tensor(0, dtype=dt)
        )
    return out.dtype if isinstance(out, torch.Tensor) else torch.tensor(out).dtype


def make_pointwise(
    ctx: Any,
    fn: Callable[..., Any],
    operands: Sequence[Any],
    dtype: torch.dtype | None = None,
    operand_dtypes: Sequence[torch.dtype] | None = None,
) -> Pointwise:
    """A ``Pointwise`` of the node's output size/dtype applying ``fn`` to the loaded operands."""
    out_dtype = ctx.out_dtype
    cdt = compute_dtype(dtype or out_dtype)
    dts = operand_dtypes or [cdt] * len(operands)
    loaders = [operand_loader(x, dt) for x, dt in zip(operands, dts)]
    # A 16-bit result computed in float32 is rounded to its dtype where a consumer reads it
    # unstored (fused), as eager's stored tensor would be: `s = x.sin(); s.sum() - s` is 0 in eager
    # and must be 0 here, not the float32 rounding error of `s`.
    rounds = is_low_precision(out_dtype) and cdt == torch.float32

    def inner_fn(index):
        v = fn(*[load(index) for load in loaders])
        return ops.to_dtype(ops.to_dtype(v, out_dtype, cdt), cdt, out_dtype) if rounds else v

    return Pointwise(inner_fn, ctx.out_size, out_dtype, ctx.device)


def refuse_like_eager(ctx: Any, operands: Sequence[Any]) -> None:
    """Decline (the ATen kernel then raises at run time) when eager refuses the operands'
    dtypes: ``bitwise_not`` of a float raises NotImplementedError before looking at any element,
    so even an empty float tensor raises, which a kernel over no elements would not."""
    key = tuple(x.get_dtype() if isinstance(x, IRNode) else _plain(x) for x in operands)
    why = _eager_refuses(ctx.node.target, key)
    if why:
        raise Unlowerable(f"eager refuses these dtypes ({why})")


def _plain(x: Any) -> Any:
    if isinstance(x, FloatSizeExpr):
        return 1.0
    if isinstance(x, sympy.Expr) and not x.is_number:
        return x  # a size expression: ``_eager_refuses`` has nothing to probe with
    if isinstance(x, sympy.Expr):
        return int(x) if x.is_integer else float(x)
    return x


@functools.cache
def _eager_refuses(op: Any, key: tuple) -> str:
    """'' when eager runs ``op`` on empty tensors of these dtypes (and these scalars)."""
    if not all(isinstance(k, (torch.dtype, int, float, bool)) for k in key):
        return ""  # a symbolic scalar: nothing to probe with
    args = [torch.empty(0, dtype=k) if isinstance(k, torch.dtype) else k for k in key]
    try:
        op(*args)
    except (NotImplementedError, RuntimeError, TypeError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return ""


def _reg_unary(target_names: Sequence[str], op_name: str) -> None:
    targets = [getattr(aten, n) for n in target_names]

    @register_lowering(*targets)
    def lower(ctx, x):
        refuse_like_eager(ctx, [x])
        return make_pointwise(ctx, lazy_op(op_name), [x])


# every unary op of the table whose result is its operand's dtype, read from the op table so a new
# op is lowered where it is declared; round keeps a lowering of its own below
UNARY_SAME_DTYPE: tuple[str, ...] = tuple(
    name
    for name, spec in OP_SPECS.items()
    if spec.kind == "pointwise" and spec.arity == 1 and spec.dtype_rule == "same"
    if name != "round"
)
for _name in UNARY_SAME_DTYPE:
    _reg_unary([_name], _name)

# predicates: bool out, computed in the operand's dtype
for _name in ("isnan", "isinf", "signbit"):

    def _pred(op_name: str) -> None:
        @register_lowering(getattr(aten, op_name))
        def lower(ctx, x):
            return make_pointwise(ctx, lazy_op(op_name), [x], dtype=promoted_dtype(x))

    _pred(_name)


@register_lowering(aten.round.default)
def _round(ctx, x):
    return make_pointwise(ctx, lazy_op("round"), [x])


@register_lowering(aten.logical_not)
def _logical_not(ctx, x):
    return make_pointwise(ctx, lazy_op("logical_not"), [x], dtype=torch.bool)


def _binary(ctx, op_name: str, a: Any, b: Any) -> Pointwise:
    return make_pointwise(ctx, lazy_op(op_name), [a, b])


for _name in (
    "maximum",
    "minimum",
    "atan2",
    "fmod",
    "remainder",
    "copysign",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "mul",
    "pow",
):

    def _reg(op_name: str) -> None:
        @register_lowering(getattr(aten, op_name))
        def lower(ctx, a, b):
            if op_name == "pow" and isinstance(a, (int, float)) and not isinstance(b, IRNode):
                raise Unlowerable("scalar ** scalar")
            if op_name == "pow" and isinstance(b, (int, float)) and not isinstance(b, bool):
                special = _pow_scalar_special(ctx, b)
                if special is not None:
                    return make_pointwise(ctx, special, [a])
            refuse_like_eager(ctx, [a, b])
            return _binary(ctx, op_name, a, b)

    _reg(_name)


def _pow_scalar_special(ctx, exponent: float) -> Callable[[Any], Any] | None:
    """How eager computes ``x ** exponent`` for the exponents its CPU kernel special-cases.

    For float32/float64/bfloat16 results eager's pow kernel does not call pow() for these
    exponents: 0.5 is sqrt, -0.5 rsqrt, -1 reciprocal, 2 / 3 / -2 products. The results differ
    from pow()'s at signed zeros and infinities (pow(-0., -0.5) is +inf, rsqrt(-0.) -inf;
    pow(-inf, -0.5) is 0, rsqrt(-inf) nan), so we compute the same expressions. float16 calls
    pow() for every exponent (no special case there).
    """
    if ctx.out_dtype not in (torch.float32, torch.float64, torch.bfloat16):
        return None
    exponent = float(exponent)
    one = lambda: ops.constant(1.0, compute_dtype(ctx.out_dtype))  # noqa: E731
    table: dict[float, Callable[[Any], Any]] = {
        0.5: lambda x: ops.sqrt(x),
        -0.5: lambda x: ops.rsqrt(x),
        -1.0: lambda x: ops.reciprocal(x),
        2.0: lambda x: ops.mul(x, x),
        3.0: lambda x: ops.mul(ops.mul(x, x), x),
        -2.0: lambda x: ops.truediv(one(), ops.mul(x, x)),
    }
    return table.get(exponent)


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):

    def _cmp(op_name: str) -> None:
        @register_lowering(getattr(aten, op_name))
        def lower(ctx, a, b):
            return make_pointwise(ctx, lazy_op(op_name), [a, b], dtype=promoted_dtype(a, b))

    _cmp(_name)

for _name in ("logical_and", "logical_or", "logical_xor"):

    def _logical(op_name: str) -> None:
        @register_lowering(getattr(aten, op_name))
        def lower(ctx, a, b):
            return make_pointwise(ctx, lazy_op(op_name), [a, b], dtype=torch.bool)

    _logical(_name)


def _scaled(ctx, op_name: str, a, b, alpha):
    if alpha == 1:
        return _binary(ctx, op_name, a, b)
    cdt = compute_dtype(ctx.out_dtype)
    return make_pointwise(
        ctx, lambda x, y: lazy_op(op_name)(x, ops.mul(y, ops.constant(alpha, cdt))), [a, b]
    )


@register_lowering(aten.add.Tensor, aten.add.Scalar)
def _add(ctx, a, b, *, alpha=1):
    return _scaled(ctx, "add", a, b, alpha)


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def _sub(ctx, a, b, *, alpha=1):
    return _scaled(ctx, "sub", a, b, alpha)


@register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(ctx, a, b, *, alpha=1):
    return _scaled(ctx, "sub", b, a, alpha)  # b - alpha * a


@register_lowering(
    aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode, prims.div.default
)
def _div(ctx, a, b, *, rounding_mode=None):
    out = ctx.out_dtype
    if rounding_mode is None:
        if not out.is_floating_point:  # prims.div on integers truncates
            if promoted_dtype(a, b).is_floating_point:
                raise Unlowerable("integer prims.div of floats")
            return _trunc_div_int(ctx, a, b)
        return _binary(ctx, "truediv", a, b)
    if rounding_mode == "floor":
        # Python's floor division, not floor(a / b): the rounded quotient of 1 / 0.1 is 10 but
        # 1 // 0.1 is 9 (ops.floordiv is (a - fmod(a, b)) / b corrected, as eager computes it)
        return _binary(ctx, "floordiv", a, b)
    if rounding_mode == "trunc":
        if out.is_floating_point:
            return make_pointwise(ctx, lambda x, y: ops.trunc(ops.truediv(x, y)), [a, b])
        return _trunc_div_int(ctx, a, b)
    raise Unlowerable(f"rounding_mode={rounding_mode!r}")


def _trunc_div_int(ctx, a, b):
    def fn(x, y):  # trunc(x / y) = floor division rounded toward zero
        q = ops.floordiv(x, y)
        r = ops.remainder(x, y)
        zero = ops.constant(0, ctx.out_dtype)
        adjust = ops.logical_and(ops.ne(r, zero), ops.ne(ops.lt(x, zero), ops.lt(y, zero)))
        return ops.where(adjust, ops.add(q, ops.constant(1, ctx.out_dtype)), q)

    return make_pointwise(ctx, fn, [a, b])


@register_lowering(
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar
)
def _where(ctx, cond, a, b):
    cdt = compute_dtype(ctx.out_dtype)
    return make_pointwise(
        ctx, lazy_op("where"), [cond, a, b], operand_dtypes=[torch.bool, cdt, cdt]
    )


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, x, mask, value):
    cdt = compute_dtype(ctx.out_dtype)
    return make_pointwise(
        ctx,
        lambda m, v, x_: ops.where(m, v, x_),
        [mask, value, x],
        operand_dtypes=[torch.bool, cdt, cdt],
    )


def _is_nan_scalar(v: Any) -> bool:
    return isinstance(v, float) and v != v


def _nan_bounds(min: Any, max: Any) -> tuple[Any, Any]:
    """Scalar NaN bounds as this torch's eager clamp treats them (versions differ: 2.13's kernels
    give NaN everywhere, older ones drop the bound): probe eager with the same bounds and keep
    them (NaN results) or drop the NaN ones; anything else runs as the ATen kernel."""
    probe = torch.tensor([0.5, -2.0, 3.0, -0.0] * 8)
    scalar = [None if isinstance(v, IRNode) else v for v in (min, max)]
    if any(isinstance(v, IRNode) for v in (min, max)):
        scalar = [v if _is_nan_scalar(v) else None for v in (min, max)]
    eager = probe.clamp(*scalar)
    if bool(eager.isnan().all()):
        return min, max
    dropped = [None if _is_nan_scalar(v) else v for v in scalar]
    if (
        any(v is not None for v in dropped)
        and torch.equal(eager, probe.clamp(*dropped))
        or all(v is None for v in dropped)
        and torch.equal(eager, probe)
    ):
        return (None if _is_nan_scalar(min) else min), (None if _is_nan_scalar(max) else max)
    raise Unlowerable("clamp with a NaN bound (eager's own kernel decides)")


@register_lowering(
    aten.clamp.default,
    aten.clamp.Tensor,
    aten.clamp_min.default,
    aten.clamp_max.default,
    aten.clamp_min.Tensor,
    aten.clamp_max.Tensor,
)
def _clamp(ctx, x, min=None, max=None):
    if ctx.node.target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        min, max = None, min
    # a NaN scalar bound: torch versions differ (2.13's kernels give NaN everywhere, older ones
    # ignore it), so do what this torch's eager kernel does
    if _is_nan_scalar(min) or _is_nan_scalar(max):
        min, max = _nan_bounds(min, max)
    operands = [x] + [v for v in (min, max) if v is not None]
    # Which of two equal values (-0. and 0.) comes out follows eager's vectorized kernels, whose
    # max/min give the second operand on a tie (ops.maximum/minimum do the same): a scalar bound
    # keeps x (clamp(-0., min=0.) is -0.), a tensor bound gives the bound (clamp(-0., min=zeros)
    # is 0.). Eager's scalar loop (tensors under 16 elements, some broadcast layouts) keeps x.
    bound_first = [not isinstance(v, IRNode) for v in (min, max) if v is not None]

    def fn(v, *bounds):
        bounds, firsts = list(bounds), list(bound_first)
        for present, op in ((min is not None, ops.maximum), (max is not None, ops.minimum)):
            if present:
                bound = bounds.pop(0)
                v = op(bound, v) if firsts.pop(0) else op(v, bound)
        return v

    return make_pointwise(ctx, fn, operands)


@register_lowering(
    aten._to_copy.default, prims.convert_element_type.default, aten.lift_fresh_copy.default
)
def _to_copy(ctx, x, dtype=None, **kwargs):
    if kwargs.get("device") is not None and torch.device(kwargs["device"]) != x.get_device():
        raise Unlowerable("device copy")
    out = ctx.out_dtype
    if isinstance(x, IRNode) and x.get_dtype() != out:
        # An explicit cast rounds through 16-bit floats even when the value stays in registers
        # (16-bit values are computed in float32): in x.to(bf16).mul(3).to(float32) both the
        # rounded x and the rounded product must be seen, as in eager. make_pointwise rounds a
        # 16-bit result; the source is rounded here when it is not a stored buffer.
        src = x.get_dtype()
        steps = (
            [src] if is_low_precision(src) and not isinstance(x, (Buffer, ReinterpretView)) else []
        )
        if steps:

            def rounded(v):
                for d in steps:
                    v = ops.to_dtype(ops.to_dtype(v, d, torch.float32), torch.float32, d)
                cdt = compute_dtype(out)
                return v if cdt == torch.float32 else ops.to_dtype(v, cdt, torch.float32)

            return make_pointwise(ctx, rounded, [x], operand_dtypes=[torch.float32])
    return make_pointwise(ctx, lambda v: v, [x])


@register_lowering(
    aten.full.default,
    aten.scalar_tensor.default,
    aten.zeros.default,
    aten.ones.default,
    aten.empty.memory_format,
    aten.full_like.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.empty_like.default,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_full.default,
    aten.new_empty.default,
    aten.fill.Scalar,
    aten.empty_strided.default,
    aten.empty_permuted.default,
)
def _full(ctx, *args, **kwargs):
    target = ctx.node.target
    name = target._opname
    if name in (
        "zeros",
        "zeros_like",
        "new_zeros",
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
        "empty_permuted",
    ):
        value = 0
    elif name in ("ones", "ones_like", "new_ones"):
        value = 1
    elif name == "scalar_tensor":
        value = args[0]
    elif name in ("full", "full_like", "fill"):
        value = args[1]
    else:  # new_full
        value = args[2]
    if isinstance(value, IRNode):
        raise Unlowerable("fill with a tensor value")
    return make_pointwise(ctx, lambda v: v, [value])


@register_lowering(
    aten.arange.start_step, aten.arange.default, aten.arange.start, prims.iota.default
)
def _arange(ctx, *args, **kwargs):
    if ctx.node.target is prims.iota.default:
        start, step = kwargs["start"], kwargs["step"]
    elif ctx.node.target is aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    cdt = compute_dtype(ctx.out_dtype)
    if not all(isinstance(v, int) for v in (start, step)) and not cdt.is_floating_point:
        raise Unlowerable("non-integer arange bounds")

    def inner_fn(index):
        i = ops.index_expr(index[0], cdt)
        return ops.add(ops.mul(i, ops.constant(step, cdt)), ops.constant(start, cdt))

    return Pointwise(inner_fn, ctx.out_size, ctx.out_dtype, ctx.device)
