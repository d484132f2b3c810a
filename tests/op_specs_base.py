"""The op-level test table's vocabulary: ``OpSpec``, the input makers and domains, the dtype
groups, and ``spec()``, which the table modules (``op_specs_pointwise.py``,
``op_specs_structural.py``) call to add to ``SPECS``. ``test_ops_specs.py`` gathers them."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

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
    options: ``LoopIROptions`` fields the graph is compiled with (a lowering that a default
        chooses by device, forced on so the table covers it on the CPU).
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
    options: dict[str, Any] = field(default_factory=dict)


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
