"""The op-level test table: every lowering in loop-ir's ``LOWERINGS`` registry, as data.

Each ``OpSpec`` names the ATen ops it covers, a function of tensors, the cases it runs on (odd sizes
1, 7 and 257; transposed and sliced inputs; broadcast operands; 0-d operands) and the dtypes it
runs in. ``test_ops_codegen.py`` traces each spec (all its dtypes in one graph) with make_fx and loop-ir's
decompositions, checks that the covered ops really are in the graph and lowered (no fallback), and
runs the graph through codegen-cpp and codegen-triton on fresh inputs against eager.

``test_every_lowering_has_a_spec`` (here) fails when a lowering is registered without a spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

aten, prims = torch.ops.aten, torch.ops.prims

F32, F16, BF16, I32, I64, BOOL = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.bool,
)
FLOATS = (F32, F16, BF16)
INTS = (I32, I64)
ALL = FLOATS + INTS + (BOOL,)

# Lowerings no CPU trace can reach: CUDA-only attention kernels (the CPU trace uses
# _scaled_dot_product_flash_attention_for_cpu). The GPU session runs the sdpa spec on CUDA, where
# the traced graph holds whichever of them the device picks.
NOT_ON_CPU = {
    aten._scaled_dot_product_flash_attention.default: "CUDA-only SDPA kernel",
    aten._scaled_dot_product_efficient_attention.default: "CUDA-only SDPA kernel",
    aten._scaled_dot_product_cudnn_attention.default: "CUDA-only SDPA kernel",
    **{
        getattr(aten, name).default: "CUDA-only SDPA backward kernel"
        for name in (
            "_scaled_dot_product_flash_attention_backward",
            "_scaled_dot_product_efficient_attention_backward",
            "_scaled_dot_product_cudnn_attention_backward",
        )
        if hasattr(aten, name)
    },
}
_SDPA_KERNELS = (aten._scaled_dot_product_flash_attention_for_cpu.default, *NOT_ON_CPU)

# Lowerings a spec's single traced graph cannot hold (an op spec traces a function of tensors with
# make_fx over fake inputs): control-flow operators need subgraph modules, and a value read at run
# time needs a data-dependent size. Each is checked end to end, against eager, by the named file.
TESTED_ELSEWHERE = {
    torch.ops.higher_order.cond: "tests/test_control_flow_e2e.py",
    torch.ops.higher_order.while_loop: "tests/test_control_flow_e2e.py",
    torch.ops.higher_order.map_impl: "tests/test_control_flow_e2e.py",
    aten._local_scalar_dense.default: "tests/test_scalar_outputs_e2e.py",
    aten._assert_scalar.default: "tests/test_scalar_outputs_e2e.py",
}


@dataclass(frozen=True)
class AnyOf:
    """A ``covers`` entry met by any one of ``ops`` (which one depends on the device)."""

    ops: tuple[Any, ...]


@dataclass(frozen=True)
class OpSpec:
    """One row of the table.

    fn: tensors -> tensor or tuple of tensors (applied to every case).
    cases: dtype -> list of cases; a case is a tuple of input makers (each ``() -> Tensor``) so
        fresh inputs with the same shapes and strides can be made for every call.
    covers: the ATen ops (overloads or packets) this spec must find in its traced graph.
    kind: "close" (against eager), "distribution" (``check`` judges the outputs), "exact".
    tol: dtype -> (rtol, atol), overriding the defaults of ``tolerance``.
    decompose: trace with loop-ir's decompositions (False: the op as called, for ops the table
        would decompose before they reach their lowering).
    fx: build the graph with ``torch.fx.symbolic_trace`` and fake-tensor propagation instead of
        make_fx, for lowerings of ops make_fx never records (CompositeImplicit ops such as
        ``aten.square``, the Scalar overloads of ``where``): they still reach loop-ir from graphs
        built by other front ends.
    """

    name: str
    fn: Callable[..., Any]
    cases: Callable[[torch.dtype], list[tuple[Callable[[], torch.Tensor], ...]]]
    covers: tuple[Any, ...]
    dtypes: tuple[torch.dtype, ...] = FLOATS
    kind: str = "close"
    tol: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    check: Callable[..., None] | None = None
    decompose: bool = True
    fx: bool = False
    extern: tuple[str, ...] = ()  # extern kernels the graph may call
    fallbacks: tuple[str, ...] = ()  # named ATen fallbacks the graph is expected to keep


# ---- input makers -----------------------------------------------------------------------------


def make(shape, dtype, domain=None, *, transposed=False, step=1, low=-20, high=20):
    """A maker of fresh random tensors: floats ~ randn (then ``domain``), ints in [low, high),
    bools ~ coin flips; ``transposed`` (2-D) or ``step`` (a slice along the last dim) make the
    result non-contiguous."""
    shape = tuple(shape)

    def maker():
        base = list(shape)
        if transposed:
            base = base[::-1]
        if step != 1:
            base[-1] = base[-1] * step
        if dtype.is_floating_point:
            t = torch.randn(base)
            if domain is not None:
                t = domain(t)
            t = t.to(dtype)
        elif dtype == BOOL:
            t = torch.randint(0, 2, base).bool()
        else:
            t = torch.randint(low, high, base, dtype=dtype)
            if domain is not None:
                t = domain(t)
        if transposed:
            t = t.t()
        if step != 1:
            t = t[..., ::step]
        return t

    return maker


def unary_cases(domain=None, **kw):
    def cases(dt):
        return [
            (make((7, 257), dt, domain, **kw),),
            (make((1,), dt, domain, **kw),),
            (make((33, 7), dt, domain, transposed=True, **kw),),
            (make((3, 5, 7), dt, domain, step=2, **kw),),
        ]

    return cases


def binary_cases(da=None, db=None, **kw):
    def cases(dt):
        return [
            (make((7, 257), dt, da, **kw), make((7, 257), dt, db, **kw)),
            (make((7, 1), dt, da, **kw), make((1, 33), dt, db, **kw)),
            (make((33, 7), dt, da, transposed=True, **kw), make((7,), dt, db, **kw)),
            (make((5, 9), dt, da, step=3, **kw), make((), dt, db, **kw)),
            (make((1,), dt, da, **kw), make((1,), dt, db, **kw)),
        ]

    return cases


def reduction_cases(domain=None):
    def cases(dt):
        return [
            (make((7, 257), dt, domain),),
            (make((1, 1), dt, domain),),
            (make((33, 7), dt, domain, transposed=True),),
            (make((3, 5, 7), dt, domain, step=2),),
        ]

    return cases


# domains keep integer inputs integer (int inputs exercise int -> float promotion)
def pos(t):
    return t.abs() + (0.5 if t.is_floating_point() else 1)


def unit(t):
    return torch.tanh(t) * 0.95 if t.is_floating_point() else t.clamp(-1, 1)


def ge1(t):
    return t.abs() + 1


def nonzero_int(t):
    return torch.where(t == 0, torch.ones_like(t), t)


def small_shift(t):
    return t.abs() % 8


# ---- the table ----------------------------------------------------------------------------------

SPECS: list[OpSpec] = []


def spec(*args, **kwargs) -> None:
    SPECS.append(OpSpec(*args, **kwargs))


# unary float math: name -> (fn, domain, looser tolerance)
_UNARY_FLOAT = {
    "abs": (torch.abs, None, False),
    "acos": (torch.acos, unit, True),
    "acosh": (torch.acosh, ge1, True),
    "asin": (torch.asin, unit, True),
    "asinh": (torch.asinh, None, True),
    "atan": (torch.atan, None, True),
    "atanh": (torch.atanh, unit, True),
    "ceil": (torch.ceil, None, False),
    "cos": (torch.cos, None, True),
    "cosh": (torch.cosh, None, True),
    "erf": (torch.erf, None, True),
    "erfc": (torch.erfc, None, True),
    "erfinv": (torch.erfinv, unit, True),
    "exp": (torch.exp, None, True),
    "exp2": (torch.exp2, None, True),
    "expm1": (torch.expm1, None, True),
    "floor": (torch.floor, None, False),
    "log": (torch.log, pos, True),
    "log10": (torch.log10, pos, True),
    "log1p": (torch.log1p, pos, True),
    "log2": (torch.log2, pos, True),
    "neg": (torch.neg, None, False),
    "reciprocal": (torch.reciprocal, pos, False),
    "relu": (torch.relu, None, False),
    "round": (torch.round, lambda t: t * 4, False),
    "rsqrt": (torch.rsqrt, pos, True),
    "sigmoid": (torch.sigmoid, None, True),
    "sign": (torch.sign, None, False),
    "sin": (torch.sin, None, True),
    "sinh": (torch.sinh, None, True),
    "sqrt": (torch.sqrt, pos, True),
    "square": (aten.square.default, None, False),
    "tan": (torch.tan, unit, True),
    "tanh": (torch.tanh, None, True),
    "trunc": (torch.trunc, lambda t: t * 4, False),
}
for _name, (_fn, _dom, _loose) in _UNARY_FLOAT.items():
    # int32 inputs too (promoted to float32, or kept int by abs/neg/relu/...), except where the
    # domain would reach the poles (atanh(1), erfinv(1) are infinite)
    spec(
        _name,
        _fn,
        unary_cases(_dom),
        (getattr(aten, _name),),
        dtypes=FLOATS if _name in ("atanh", "erfinv") else FLOATS + (I32,),
        tol={F32: (2e-5, 1e-5), I32: (2e-5, 1e-5)} if _loose else {},
        fx=_name == "square",
    )

spec(
    "isinf_isnan_signbit",
    lambda x: (torch.isinf(x / (x - x.round())), torch.isnan(x.log()), torch.signbit(x)),
    unary_cases(lambda t: t * 2),
    (aten.isinf, aten.isnan, aten.signbit),
)
spec(
    "abs_neg_sign_int",
    lambda x: (x.abs(), -x, x.sign(), x * x),
    unary_cases(),
    (aten.abs, aten.neg, aten.sign),
    dtypes=INTS,
)
spec("bitwise_not", torch.bitwise_not, unary_cases(), (aten.bitwise_not,), dtypes=INTS + (BOOL,))
spec("logical_not", torch.logical_not, unary_cases(), (aten.logical_not,), dtypes=ALL)

# binary math
spec(
    "add_sub_mul",
    lambda a, b: (a + b, a - b, a * b, a + 2 * b),
    binary_cases(),
    (aten.add.Tensor, aten.sub.Tensor, aten.mul),
    dtypes=FLOATS + INTS,
)
spec(
    "scalar_forms",
    lambda a: (
        aten.add.Scalar(a, 3),
        aten.sub.Scalar(a, 2),
        5 - a,
        a * 3,
        torch.rsub(a, a, alpha=2),
    ),
    unary_cases(),
    (aten.add.Scalar, aten.sub.Scalar, aten.rsub.Scalar, aten.rsub.Tensor),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec("div", lambda a, b: (a / b, a / 3.0), binary_cases(db=pos), (aten.div.Tensor,))
spec(
    "div_scalar",
    lambda a: aten.div.Scalar(a, 3.0),
    unary_cases(),
    (aten.div.Scalar,),
    decompose=False,
)
spec(
    "div_modes",
    lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc")),
    binary_cases(lambda t: t * 9, nonzero_int),
    (aten.div.Tensor_mode,),
    dtypes=INTS,
)
spec(
    "div_modes_float",
    lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc")),
    binary_cases(lambda t: t * 9, pos),
    (aten.div.Tensor_mode,),
    dtypes=(F32,),
)
spec(
    "div_scalar_mode",
    lambda a: (
        aten.div.Scalar_mode(a, 3, rounding_mode="floor"),
        aten.div.Scalar_mode(a, 3, rounding_mode="trunc"),
    ),
    unary_cases(),
    (aten.div.Scalar_mode,),
    dtypes=INTS + (F32,),
    decompose=False,
)
spec(
    "prims_div",
    lambda a, b: prims.div(a, b),
    lambda dt: [
        (make((7, 257), dt, nonzero_int), make((7, 257), dt, nonzero_int)),
        (make((33, 7), dt, nonzero_int, transposed=True), make((33, 7), dt, nonzero_int)),
        (make((1,), dt, nonzero_int), make((1,), dt, nonzero_int)),
    ],
    (prims.div,),
    dtypes=(F32,) + INTS,
    decompose=False,
)
spec(
    "atan2_copysign",
    lambda a, b: (torch.atan2(a, b), torch.copysign(a, b)),
    binary_cases(),
    (aten.atan2, aten.copysign),
    tol={F32: (2e-5, 1e-5)},
)
spec(
    "fmod_remainder",
    lambda a, b: (torch.fmod(a, b), torch.remainder(a, b)),
    binary_cases(db=pos),
    (aten.fmod, aten.remainder),
    tol={F32: (1e-5, 1e-5)},
)
spec(
    "fmod_remainder_int",
    lambda a, b: (torch.fmod(a, b), torch.remainder(a, b)),
    binary_cases(db=nonzero_int),
    (aten.fmod, aten.remainder),
    dtypes=INTS,
)
spec(
    "pow",
    lambda a, b: (torch.pow(a, b), a**2, a**0.5),
    binary_cases(pos),
    (aten.pow,),
    tol={F32: (2e-5, 1e-5)},
)
spec(
    "pow_int",
    lambda a, b: (torch.pow(a, b), a**3),
    binary_cases(db=small_shift),
    (aten.pow,),
    dtypes=INTS,
)
spec(
    "maximum_minimum",
    lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)),
    binary_cases(),
    (aten.maximum, aten.minimum),
    dtypes=FLOATS + INTS + (BOOL,),
)
spec(
    "comparisons",
    lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b, a > 0.5),
    binary_cases(lambda t: t.round(), lambda t: t.round()),
    (aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge),
    dtypes=ALL,
)
spec(
    "logical",
    lambda a, b: (torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_xor(a, b)),
    binary_cases(lambda t: t.round(), lambda t: t.round()),
    (aten.logical_and, aten.logical_or, aten.logical_xor),
    dtypes=ALL,
)
spec(
    "bitwise",
    lambda a, b: (a & b, a | b, a ^ b),
    binary_cases(),
    (aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor),
    dtypes=INTS + (BOOL,),
)
spec(
    "shifts",
    lambda a, b: (aten.bitwise_left_shift.Tensor(a, b), aten.bitwise_right_shift.Tensor(a, b)),
    binary_cases(db=small_shift),
    (aten.bitwise_left_shift, aten.bitwise_right_shift),
    dtypes=INTS,
    fx=True,
)

# where / clamp / masked_fill
spec(
    "where",
    lambda c, a, b: (
        aten.where.self(c, a, b),
        aten.where.ScalarOther(c, a, 2.0),
        aten.where.ScalarSelf(c, 3.0, b),
        aten.where.Scalar(c, 1.0, 0.0),
    ),
    lambda dt: [
        (make((7, 257), BOOL), make((7, 257), dt), make((257,), dt)),
        (make((7, 1), BOOL), make((7, 33), dt, transposed=True), make((), dt)),
        (make((1,), BOOL), make((1,), dt), make((1,), dt)),
    ],
    (aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar),
    dtypes=FLOATS + INTS,
    fx=True,
)
spec(
    "clamp",
    lambda a, lo, hi: (
        torch.clamp(a, -0.5, 0.5),
        torch.clamp(a, lo, hi),
        torch.clamp_min(a, 0.1),
        torch.clamp_max(a, 0.2),
        torch.clamp_min(a, lo),
        torch.clamp_max(a, hi),
    ),
    lambda dt: [
        (make((7, 257), dt), make((257,), dt, lambda t: -t.abs()), make((7, 1), dt, pos)),
        (make((33, 7), dt, transposed=True), make((), dt), make((), dt)),
        (make((1,), dt), make((1,), dt), make((1,), dt)),
    ],
    (
        aten.clamp.default,
        aten.clamp.Tensor,
        aten.clamp_min.default,
        aten.clamp_max.default,
        aten.clamp_min.Tensor,
        aten.clamp_max.Tensor,
    ),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "masked_fill",
    lambda x, m, v: (x.masked_fill(m, -1.5), x.masked_fill(m, v)),
    lambda dt: [
        (make((7, 257), dt), make((7, 257), BOOL), make((), dt)),
        (make((33, 7), dt, transposed=True), make((7,), BOOL), make((), dt)),
        (make((1,), dt), make((1,), BOOL), make((), dt)),
    ],
    (aten.masked_fill.Scalar, aten.masked_fill.Tensor),
    dtypes=FLOATS + INTS,
    decompose=False,
)

# casts
_CAST_TARGETS = (F32, F16, BF16, I32, I64, BOOL)
spec(
    "to_dtype",
    lambda x: tuple(x.to(d) for d in _CAST_TARGETS) + (x.to(F32) * 2,),
    unary_cases(lambda t: t * 8),
    (aten._to_copy,),
    dtypes=ALL,
    decompose=False,
)
spec(
    "convert_element_type",
    lambda x: tuple(prims.convert_element_type(x, d) for d in _CAST_TARGETS),
    unary_cases(lambda t: t * 8),
    (prims.convert_element_type,),
    dtypes=ALL,
    decompose=False,
)


def _factories(x):
    n, m = x.shape
    e = torch.empty(n, m, dtype=x.dtype).fill_(2)
    return (
        torch.arange(m, dtype=x.dtype) + x,
        torch.arange(2, m + 2, dtype=x.dtype) * x,
        torch.arange(1, 3 * m, 3, dtype=x.dtype) + x,
        e + x,
        torch.empty_like(x).fill_(1) - x,
        torch.full((n, m), 3, dtype=x.dtype) * x,
        torch.full_like(x, 7) + x,
        x.new_full((n, m), 2) * x,
        x.new_ones((n, m)) + x,
        x.new_zeros((m,)) + x,
        torch.ones(n, m, dtype=x.dtype) - x,
        torch.ones_like(x) + x,
        torch.zeros(m, dtype=x.dtype) + x,
        torch.zeros_like(x) - x,
        x.new_empty((n, m)).fill_(4) * x,
        torch.empty_strided((n, m), (1, n), dtype=x.dtype).fill_(3) + x,
    )


spec(
    "factories",
    _factories,
    lambda dt: [
        (make((7, 257), dt, lambda t: t.round()),),
        (make((1, 1), dt),),
        (make((33, 7), dt, transposed=True),),
    ],
    (
        aten.arange.default,
        aten.arange.start,
        aten.arange.start_step,
        aten.empty.memory_format,
        aten.empty_like.default,
        aten.full.default,
        aten.full_like.default,
        aten.new_full.default,
        aten.new_ones.default,
        aten.new_zeros.default,
        aten.ones.default,
        aten.ones_like.default,
        aten.zeros.default,
        aten.zeros_like.default,
        aten.new_empty.default,
        aten.fill.Scalar,
        aten.empty_strided.default,
    ),
    dtypes=(F32, BF16, I64),
    decompose=False,
)
spec(
    "iota_scalar_tensor_empty_permuted",
    lambda x: (
        prims.iota(x.shape[-1], start=3, step=2, dtype=I64, device=x.device, requires_grad=False)
        + x,
        aten.scalar_tensor.default(2.5, dtype=F32) * x,
        aten.empty_permuted.default(x.shape, (1, 0), dtype=x.dtype, device=x.device).fill_(1) + x,
    ),
    lambda dt: [(make((7, 257), dt),), (make((1, 1), dt),)],
    (prims.iota, aten.scalar_tensor.default, aten.empty_permuted.default),
    dtypes=(F32, I64),
    decompose=False,
)

# reductions
spec(
    "sum_prod_mean",
    lambda x: (
        x.sum(-1),
        x.sum(0, keepdim=True),
        x.sum(),
        x.mean(-1),
        x.mean(),
        (x * 0.5 + 1).prod(-1),
        (x * 0.5 + 1).prod(),
    ),
    reduction_cases(lambda t: t * 0.5),
    (
        aten.sum.dim_IntList,
        aten.sum.default,
        aten.mean.dim,
        aten.mean.default,
        aten.prod.dim_int,
        aten.prod.default,
    ),
    tol={F32: (1e-5, 1e-5)},
    decompose=False,
)
spec(
    "split_reductions",
    lambda x, y: (
        x.sum(),
        x.amax(),
        x.reshape(4, -1).sum(-1),
        (x > 2).any(),
        y.var(),
        *torch.var_mean(y.reshape(2, -1), -1),
    ),
    lambda dt: [(make((2**17,), dt), make((2**17,), dt, lambda t: 1000 + t))],
    (
        aten.sum.default,
        aten.amax.default,
        aten.sum.dim_IntList,
        aten.any.default,
        aten.var.correction,
        aten.var_mean.correction,
    ),
    dtypes=(F32,),
    tol={F32: (2e-5, 1e-3)},
    decompose=False,
)
spec(
    "cumsum",
    lambda x: (x.cumsum(-1), x.cumsum(0), torch.cumsum(x, -1, dtype=F32) * 2),
    lambda dt: [
        (make((7, 257), dt),),
        (make((33, 7), dt, transposed=True),),
        (make((1, 1), dt),),
        (make((3, 5, 7), dt, step=2),),
    ],
    (aten.cumsum.default,),
    dtypes=ALL,
    tol={F32: (1e-5, 2e-5), BF16: (1.6e-2, 0.3), F16: (2e-3, 0.05)},
    decompose=False,
)
spec(
    "sum_prod_int",
    lambda x: (x.sum(-1), x.sum(), (x % 3).prod(-1), x.sum(-1, dtype=F32)),
    reduction_cases(),
    (aten.sum.dim_IntList, aten.sum.default, aten.prod.dim_int),
    dtypes=INTS + (BOOL,),
    decompose=False,
)
spec(
    "amax_amin_max_min",
    lambda x: (x.amax(-1), x.amin(0, keepdim=True), x.max(), x.min(), x.amax((0, -1))),
    reduction_cases(),
    (aten.amax.default, aten.amin.default, aten.max.default, aten.min.default),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "argmax_argmin_max_dim",
    lambda x: (x.argmax(-1), x.argmin(0), x.argmax(), *x.max(-1), *x.min(0, keepdim=True)),
    reduction_cases(),
    (aten.argmax.default, aten.argmin.default, aten.max.dim, aten.min.dim),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "argmax_ties",
    lambda x: (x.argmax(-1), x.argmin(-1), x.argmax(0), x.argmin(), *x.max(-1)),
    lambda dt: [
        (
            make(
                (7, 257),
                dt,
                lambda t: (t > 0.8).to(t.dtype) * 3 - (t < -0.8).to(t.dtype) * 3,
                low=0,
                high=2,
            ),
        ),
        (make((33, 7), dt, lambda t: t.round().clamp(-1, 1), transposed=True, low=0, high=2),),
        (lambda: torch.zeros(5, 3000).to(dt),),
    ],
    (aten.argmax.default, aten.argmin.default, aten.max.dim),
    dtypes=(F32, BF16, I64),
    kind="exact",
    decompose=False,
)
spec(
    "any_all",
    lambda x: (x.any(), x.any(-1), x.any((0, -1)), x.all(), x.all(0), x.all((0, -1))),
    reduction_cases(lambda t: (t > 1.5).to(t.dtype)),
    (aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims),
    dtypes=(F32, I64, BOOL),
    decompose=False,
)
spec(
    "var_dim",
    lambda x: (aten.var.dim(x, [-1], True, False), aten.var.dim(x, [0], False, True)),
    reduction_cases(),
    (aten.var.dim,),
    tol={F32: (2e-5, 1e-5)},
    fx=True,
)
spec(
    "var_std_var_mean",
    lambda x: (
        x.var(-1),
        torch.var(x, 0, unbiased=False, keepdim=True),
        x.std(-1),
        x.std(),
        *torch.var_mean(x, -1, correction=0),
        *torch.var_mean(x, (0, -1), keepdim=True),
    ),
    lambda dt: [
        (make((7, 257), dt),),
        (make((33, 7), dt, transposed=True),),
        (make((3, 5, 7), dt, lambda t: 1000 + t, step=2),),
        (make((2, 2000), dt, lambda t: 1000 + t),),
    ],
    (aten.var.correction, aten.std.correction, aten.var_mean.correction),
    # the 1000 + t cases: float32 near 1000 has an ulp of 6e-5, so any order of summation
    # (a GPU's tree, the CPU's sequential Welford, eager's) differs from another by ~1e-4
    tol={F32: (1e-4, 1e-4), F16: (2e-3, 1e-2), BF16: (1.6e-2, 5e-2)},
    decompose=False,
)

# views and layout
spec(
    "views",
    lambda x: (
        x.contiguous().view(-1) * 2,
        x.reshape(x.shape[-1], -1) + 1,
        x.permute(1, 0) * 2,
        x.transpose(0, 1) + 1,
        x.t() * 2,
        x[None].expand(3, -1, -1) * 1,
        x.unsqueeze(1) + 0,
        x[None, :, None].squeeze() + 0,
        x[None].squeeze(0) + 0,
        x[None, None].squeeze((0, 1)) + 0,
        x[1:, ::2] + 1,
        x[:, -3:] * 2,
        x[0] + 1,
        x[:, -1] * 2,
        aten._unsafe_view(x.contiguous() * 1, (-1,)),
        aten.alias(x) + 1,
        x.detach() * 3,
        x.clone(),
        x.as_strided((2, 2), (1, 2), 1) + 0,
    ),
    lambda dt: [(make((7, 257), dt),), (make((33, 7), dt, transposed=True),)],
    (
        aten.view.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.expand.default,
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.slice.Tensor,
        aten.select.int,
        aten._unsafe_view.default,
        aten.alias.default,
        aten.detach.default,
        aten.clone.default,
        aten.as_strided.default,
    ),
    dtypes=ALL,
    decompose=False,
)
spec(
    "as_strided_computed",
    lambda x: (
        F.adaptive_avg_pool2d(x * 2, 1).flatten(1) + 1,
        (x.transpose(1, 3) + 1).as_strided((7, 3), (2, 5), 3) * 2,
        torch.as_strided_scatter(x * 3, x[0, :2, :2, 0] - 1, (2, 2), (7, 2), 5),
        torch.as_strided_scatter(x.exp(), x[1, 0, :2, :3], (2, 3), (1, 4), 2) + 1,
    ),
    lambda dt: [
        (lambda dt=dt: torch.randn(2, 5, 3, 4).to(dt).to(memory_format=torch.channels_last),),
        (make((2, 5, 3, 4), dt),),
    ],
    # adaptive_avg_pool2d's composite kernel restrides its mean of a channels-last input with a raw
    # as_strided_; the second reads a computed value by eager's (transposed) storage order; the
    # scatters' views begin 5 and 2 elements into a contiguous value: index functions must stay
    # on non-negative numbers
    (aten.as_strided_.default, aten.as_strided.default, aten.as_strided_scatter.default),
)
spec(
    "slice_scatter",
    lambda x, s: (
        torch.slice_scatter(x, s, 1, 2, 5),
        torch.slice_scatter(x, s[:, :2], 1, 1, None, 2),
        torch.slice_scatter(x, x[-3:], 0, -3),
        torch.slice_scatter(x, x[:2], 0, 5, 100),
    ),
    lambda dt: [
        (make((7, 5), dt), make((7, 3), dt)),
        (make((7, 5), dt, transposed=True), make((7, 3), dt, transposed=True)),
    ],
    (aten.slice_scatter.default,),
    dtypes=ALL,
)
spec(
    "constant_pad_nd",
    lambda x: (
        F.pad(x, (1, 2), value=-100),
        F.pad(x, (0, 1, 2, 0)),
        F.pad(x, (-1, 2, 1, -2), value=3),
    ),
    lambda dt: [(make((7, 5), dt),), (make((7, 5), dt, transposed=True),)],
    (aten.constant_pad_nd.default,),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "views_as_written",
    lambda x: (
        aten.mul.Tensor(aten.reshape.default(x, [-1]), 2),
        aten.add.Tensor(aten.lift_fresh.default(x), 1),
        aten.mul.Tensor(aten.lift_fresh_copy.default(x), 3),
    ),
    lambda dt: [(make((7, 257), dt),), (make((33, 7), dt, transposed=True),)],
    (aten.reshape.default, aten.lift_fresh.default, aten.lift_fresh_copy.default),
    dtypes=(F32, I64),
    fx=True,
)
spec(
    "cat_split_unbind",
    lambda x, y: (
        torch.cat([x, y * 2], 0),
        torch.cat([x.t(), x.t()], 1),
        *[s * 2 for s in x.split(3, 0)],
        *[s + 1 for s in x.split_with_sizes([2, 5], 0)],
        *[s * 3 for s in x.unbind(1)[:3]],
    ),
    lambda dt: [
        (make((7, 5), dt), make((3, 5), dt)),
        (make((7, 9), dt, transposed=True), make((2, 9), dt, step=2)),
    ],
    (aten.cat.default, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int),
    dtypes=ALL,
    decompose=False,
)

# indexing
spec(
    "embedding_gather_index_select",
    lambda w, i, j: (
        F.embedding(i, w) * 2,
        torch.gather(w, 1, j),
        w.index_select(0, i.flatten()),
        w[i],
        w[:, j[0]],
    ),
    lambda dt: [
        (
            make((11, 5), dt),
            lambda: torch.randint(0, 11, (3, 4)),
            lambda: torch.randint(0, 5, (11, 3)),
        ),
        (
            make((11, 5), dt, transposed=True),
            lambda: torch.randint(0, 11, (1,)),
            lambda: torch.randint(0, 5, (11, 1)),
        ),
    ],
    (aten.embedding.default, aten.gather.default, aten.index_select.default, aten.index.Tensor),
    dtypes=FLOATS + INTS,
)


def _unique_rows(n, k, cols):
    """(k, cols) int64 indices into n rows, unique down every column (plain scatter is only
    defined without duplicates)."""
    return lambda: torch.stack([torch.randperm(n)[:k] for _ in range(cols)], 1)


spec(
    "scatter",
    lambda x, i, s, j: (
        x.scatter(0, i, s),
        x.scatter(0, i, 2.5),
        x.scatter_add(1, j, s),
        x.scatter_reduce(0, i, s, "sum"),
    ),
    lambda dt: [
        (
            make((7, 5), dt),
            _unique_rows(7, 4, 5),
            make((4, 5), dt),
            lambda: torch.randint(0, 5, (4, 5)),
        ),
        (
            make((7, 5), dt, transposed=True),
            _unique_rows(7, 1, 5),
            make((1, 5), dt),
            lambda: torch.randint(0, 5, (1, 5)),
        ),
    ],
    (aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter_reduce.two),
    dtypes=(F32, I32, I64),
    decompose=False,
)
spec(
    "index_put",
    lambda x, i, v, j, k, w, m, s: (
        torch.index_put(x, (i,), v),
        torch.index_put(x, (j,), v, accumulate=True),
        torch.index_put(x, (j, k), w, accumulate=True),
        torch.index_put(x, (m,), s),
    ),
    lambda dt: [
        (
            make((7, 5), dt),
            lambda: torch.randperm(7)[:4] - 3,
            make((4, 5), dt),
            lambda: torch.randint(-7, 7, (4,)),
            lambda: torch.randint(0, 5, (4,)),
            make((4,), dt),
            make((7,), BOOL),
            make((), dt),
        )
    ],
    (aten.index_put.default,),
    dtypes=(F32, I64),
    decompose=False,
)


def _sliced_puts(x, i, j, v, w, u):
    a = x.clone()
    a[:, i] = v  # index_put(x, [None, i], v)
    b = x.clone()
    b[:, i, j] += w  # index, add, index_put(x, [None, i, j], ...)
    c = x.clone()
    c[i, :, j] = u  # non-adjacent index tensors: their shape comes first
    return a, b, c


spec(
    "index_put_sliced",
    _sliced_puts,
    lambda dt: [
        (
            make((4, 5, 6), dt),
            lambda: torch.randperm(4)[:3],
            lambda: torch.randperm(6)[:3],
            make((4, 3, 6), dt),
            make((4, 3), dt),
            make((3, 5), dt),
        ),
        (
            make((4, 5, 6), dt, step=2),
            lambda: torch.randperm(4)[:1] - 4,
            lambda: torch.randperm(6)[:1],
            make((4, 1, 6), dt),
            make((1,), dt),
            make((5,), dt),
        ),
    ],
    (aten.index_put.default,),
    dtypes=(F32, BF16, I64),
    decompose=False,
)


def fixed_count_mask(shape, count):
    """Fresh random boolean masks with ``count`` True elements: the output size of ``x[mask]``
    depends on the data, and a traced graph holds for that size only."""

    def maker():
        flat = torch.zeros(torch.Size(shape).numel(), dtype=BOOL)
        flat[torch.randperm(flat.numel())[:count]] = True
        return flat.view(shape)

    return maker


spec(
    "boolean_mask_read",
    lambda x, m: (x[m] * 2, torch.nonzero(m)),
    lambda dt: [(make((7, 5), dt), fixed_count_mask((7, 5), 13))],
    (aten.index.Tensor,),
    dtypes=(F32,),
    fallbacks=("aten.index.Tensor", "aten.nonzero"),
)

# pooling
spec(
    "max_pool2d",
    lambda x: F.max_pool2d_with_indices(x, 3, 2, 1),
    lambda dt: [(make((2, 3, 9, 11), dt),), (make((1, 1, 3, 3), dt),)],
    (aten.max_pool2d_with_indices.default,),
    dtypes=FLOATS,
    decompose=False,
)

spec(
    "avg_pool2d",
    lambda x: (
        F.avg_pool2d(x, 3, 2, 1),
        F.avg_pool2d(x, 2, ceil_mode=True),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False, ceil_mode=True),
        F.avg_pool2d(x, (2, 3), divisor_override=4),
    ),
    lambda dt: [(make((2, 3, 9, 11), dt),), (make((1, 1, 4, 5), dt),)],
    (aten.avg_pool2d.default,),
    dtypes=FLOATS,
    decompose=False,
)
spec(
    "copy",
    lambda d, s: (aten.copy(d, s) * 2, aten.copy(d, s[:1]).sin()),
    lambda dt: [(make((5, 7), dt), make((5, 7), dt)), (make((3, 4), dt), make((3, 4), F32))],
    (aten.copy.default,),
    dtypes=FLOATS,
    decompose=False,
)

# backward kernels run as named externs
spec(
    "convolution_backward",
    lambda g, x, w: aten.convolution_backward(
        g, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]
    ),
    lambda dt: [(make((2, 4, 7, 9), dt), make((2, 3, 7, 9), dt), make((4, 3, 3, 3), dt))],
    (aten.convolution_backward.default,),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=("aten.convolution_backward",),
)
spec(
    "pooling_backward",
    lambda g, x: (
        aten.max_pool2d_with_indices_backward(
            g,
            x,
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            False,
            aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])[1],
        ),
        aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], False, True, None),
    ),
    lambda dt: [(make((2, 3, 5, 6), dt), make((2, 3, 9, 11), dt))],
    (aten.max_pool2d_with_indices_backward.default, aten.avg_pool2d_backward.default),
    dtypes=(F32,),
    decompose=False,
    extern=("aten.max_pool2d_with_indices_backward", "aten.avg_pool2d_backward"),
)
spec(
    "sdpa_backward",
    lambda g, q, k, v: aten._scaled_dot_product_flash_attention_for_cpu_backward(
        g, q, k, v, *aten._scaled_dot_product_flash_attention_for_cpu(q, k, v), 0.0, False
    ),
    lambda dt: [
        (
            make((2, 3, 7, 8), dt),
            make((2, 3, 7, 8), dt),
            make((2, 3, 7, 8), dt),
            make((2, 3, 7, 8), dt),
        )
    ],
    (aten._scaled_dot_product_flash_attention_for_cpu_backward.default,),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=(
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward",
    ),
)

# extern kernels, with pointwise epilogues
spec(
    "matmuls",
    lambda a, b, c, x, y: (
        torch.relu(a @ b + 1),
        torch.addmm(c, a, b) * 2,
        torch.bmm(x, y) - 1,
        torch.baddbmm(x[:, :, :3], x, y) + 0,
    ),
    lambda dt: [
        (
            make((7, 9), dt),
            make((9, 3), dt),
            make((3,), dt),
            make((2, 3, 3), dt),
            make((2, 3, 3), dt),
        )
    ],
    (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default),
    dtypes=(F32, BF16),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"),
)
spec(
    "convolution",
    lambda x, w, b: (torch.relu(F.conv2d(x, w, b, padding=1)),),
    lambda dt: [(make((2, 3, 7, 9), dt), make((4, 3, 3, 3), dt), make((4,), dt))],
    (aten.convolution.default,),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    # on the CPU through oneDNN with the relu fused (loop-ir's mkldnn.py), elsewhere ATen's
    extern=("aten.convolution", "torchkiln.mkldnn_convolution"),
)
spec(
    "sdpa",
    lambda q, k, v: (F.scaled_dot_product_attention(q, k, v) * 2,),
    lambda dt: [(make((2, 3, 7, 8), dt), make((2, 3, 7, 8), dt), make((2, 3, 7, 8), dt))],
    (AnyOf(_SDPA_KERNELS),),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    extern=tuple(str(op).removesuffix(".default") for op in _SDPA_KERNELS),
)


# random ops: judged by their distribution
def _check_random(outs, inputs):
    (u, u2, n, n2, b, bp, d, mask, _), x = outs, inputs[0]
    for t in (u, u2):
        assert 0 <= float(t.min()) and float(t.max()) < 1
        assert (
            abs(float(t.float().mean()) - 0.5) < 0.03
            and abs(float(t.float().var()) - 1 / 12) < 0.01
        )
    for t in (n, n2):
        assert abs(float(t.float().mean())) < 0.06 and abs(float(t.float().var()) - 1) < 0.1
    assert not torch.equal(u, u2)  # two random ops in one graph draw different numbers
    assert abs(float(b.float().mean()) - 0.3) < 0.03 and abs(float(bp.float().mean()) - 0.7) < 0.03
    keep = mask.float().mean()
    assert abs(float(keep) - 0.8) < 0.03
    torch.testing.assert_close(
        d, torch.where(mask, x / 0.8, torch.zeros_like(x)), rtol=1e-2, atol=1e-2
    )


spec(
    "random",
    lambda x: (
        torch.rand(64, 64),
        torch.rand_like(x),
        torch.randn(64, 64),
        torch.randn_like(x),
        torch.bernoulli(torch.full_like(x, 0.3)),
        torch.bernoulli(x, 0.7),
        aten.native_dropout(x, 0.2, True),
        x * 1,
    ),
    lambda dt: [(make((64, 64), dt),)],
    (
        aten.rand.default,
        aten.rand_like.default,
        aten.randn.default,
        aten.randn_like.default,
        aten.bernoulli.default,
        aten.bernoulli.p,
        aten.native_dropout.default,
    ),
    dtypes=(F32, BF16),
    kind="distribution",
    check=_check_random,
    decompose=False,
)


def covered_ops() -> set[Any]:
    """Every op some spec covers (overloads and packets as written)."""
    return {
        o for s in SPECS for op in s.covers for o in (op.ops if isinstance(op, AnyOf) else (op,))
    }


def covers(op: Any, ops: set[Any]) -> bool:
    """True if ``op`` (an overload or a packet) is among ``ops``, matching packets to overloads."""
    if isinstance(op, AnyOf):
        return any(covers(o, ops) for o in op.ops)
    packet = getattr(op, "overloadpacket", op)
    return op in ops or packet in ops or any(getattr(o, "overloadpacket", None) is op for o in ops)


def test_every_lowering_has_a_spec():
    import torchkiln_loop_ir as L

    ops = covered_ops()
    missing = sorted(
        str(op)
        for op in L.LOWERINGS
        if op not in NOT_ON_CPU and op not in TESTED_ELSEWHERE and not covers(op, ops)
    )
    assert not missing, f"lowerings without an op spec in tests/test_ops_specs.py: {missing}"


def test_spec_names_are_unique():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
