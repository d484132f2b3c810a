"""The virtualized ``ops`` handler of the define-by-run loop IR.

IR bodies are plain Python functions over sympy index symbols that call ``ops.<name>(...)``.
Which handler answers is ambient state held in a ``ContextVar``: a code generator installs its own
handler (emitting C++ or Triton text), an analysis pass installs one that records reads and writes.

The contract every handler implements (values are opaque handler objects; indices are sympy
expressions over the kernel's index symbols and size symbols; dtypes are ``torch.dtype``):

memory
  load(name, index) -> value                        read buffer ``name`` at flat element ``index``
  store(name, index, value, mode=None) -> None      write; mode None (overwrite) or "atomic_add"
      (a ``Scatter`` body: scatter/index_put overwrite, scatter_add/index_put(accumulate) add;
      with duplicate indices an overwrite's winner is unspecified, as in eager)
  reduction(dtype, src_dtype, reduction_type, value) -> value
      reduce ``value`` over the kernel's reduction index symbols. reduction_type is one of
      sum, prod, max, min, argmax, argmin, any, xor_sum, welford_reduce, welford_combine.
      welford_reduce returns a tuple (mean, m2, weight) (var = m2 / (weight - correction));
      welford_combine takes ``value`` = a tuple (mean, m2, weight) of partial results (a split
      Welford reduction's partials) and combines them into one (mean, m2, weight) (Chan et al.); argmax/argmin return the index
      (int64) of the first extreme value along the flattened reduction range (ties: the lowest).
      Several buffers may reduce the same value with the same type in one kernel (welford's mean
      and m2 are two buffers of one ``Reduction`` with ``output_index`` 0 and 1): a handler must
      return the same result for them, computed in one pass (cache by type and value).
  store_reduction(name, index, value) -> None       write a reduced value; index uses no r symbols
  index_expr(expr, dtype) -> value                  a sympy expression as a computed value
  indirect_indexing(value, size, check=True) -> sympy.Symbol
      turn a computed integer into an index symbol usable in later load/store indices. Negative
      values are already wrapped by the lowering; ``check`` asks for a bounds assertion.
  masked(mask, body, other) -> value                run ``body()`` where ``mask`` holds, else ``other``
constants and conversion
  constant(value, dtype), to_dtype(x, dtype, src_dtype=None), to_dtype_bitcast(x, dtype, src_dtype)
random
  load_seed(name, offset) -> value, rand(seed, offset) -> float32 in [0, 1),
  randn(seed, offset) -> float32 N(0, 1), randint64(seed, offset, low, high) -> int64
pointwise (elementwise, operands already promoted to one dtype by the lowering)
  add sub mul truediv floordiv mod remainder neg abs pow maximum minimum
  exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos atan atan2
  sinh cosh tanh asinh acosh atanh erf erfc erfinv sigmoid relu sign floor ceil trunc round
  fmod copysign signbit isinf isnan logical_and logical_or logical_xor logical_not
  bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift
  eq ne lt le gt ge where square
  Semantics are eager's: floordiv is Python's (of floats too: 1 // 0.1 is 9), maximum/minimum
  propagate NaN and give the second operand on a tie (-0. and 0.), sign(nan) is 0; an integer
  floordiv/mod/remainder/fmod by zero raises RuntimeError('ZeroDivisionError') where eager's
  kernels do (its CPU kernels; a backend reports it after the kernel, through an error flag).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class OpSpec:
    """One op of the contract: its name, family, arity and result-dtype rule.

    ``arity`` counts the positional arguments every caller passes (optional ones such as
    ``store``'s ``mode`` are not counted). ``dtype_rule`` says what a handler's result is:

    - ``same``: the dtype of the first operand (operands are already promoted to one dtype);
    - ``bool``: ``torch.bool``;
    - ``second``: the dtype of the second operand (``where(cond, a, b)``);
    - ``argument``: the ``dtype`` argument of the call (``constant``, ``to_dtype``, ...);
    - ``buffer``: the buffer's dtype, 16-bit floats widened to float32 (``load``);
    - ``body``: what the masked body returned (``masked``);
    - ``index``: a sympy index symbol, not a value (``indirect_indexing``);
    - ``none``: nothing (the stores);
    - ``int64`` / ``float32``: that dtype (random numbers and seeds).

    ``operands`` (pointwise ops) is the dtype family the lowerings hand the op: ``any``,
    ``float`` (math: lowerings compute it in a floating dtype) or ``integer`` (integers and
    bool: the bitwise ops). A handler's result dtype must follow the rule over that family.
    """

    name: str
    kind: str  # memory | reduction | index | conversion | random | pointwise
    arity: int
    dtype_rule: str
    operands: str = "any"


LIBM_UNARY: tuple[str, ...] = tuple(
    """exp exp2 expm1 log log2 log10 log1p sqrt sin cos tan asin acos atan
    sinh cosh tanh asinh acosh atanh erf erfc""".split()
)
"""The float unary ops that are C's math functions of the same name: one list here, which the
op table, the lowerings and a code generator's templates (``std::<name>``) all read."""


def _specs() -> dict[str, OpSpec]:
    table: dict[str, OpSpec] = {}

    def add(kind: str, arity: int, rule: str, names: str, operands: str = "any") -> None:
        for name in names.split():
            table[name] = OpSpec(name, kind, arity, rule, operands)

    add("memory", 2, "buffer", "load")
    add("memory", 3, "none", "store store_reduction")
    add("reduction", 4, "argument", "reduction")
    add("index", 2, "argument", "index_expr")
    add("index", 2, "index", "indirect_indexing")
    add("memory", 3, "body", "masked")
    add("conversion", 2, "argument", "constant to_dtype")
    add("conversion", 3, "argument", "to_dtype_bitcast")
    add("random", 2, "int64", "load_seed")
    add("random", 2, "float32", "rand randn")
    add("random", 4, "int64", "randint64")
    add("pointwise", 2, "same", "add sub mul floordiv mod remainder maximum minimum fmod")
    add("pointwise", 1, "same", "neg abs square sign floor ceil trunc round relu")
    add("pointwise", 2, "same", "truediv pow atan2 copysign", operands="float")
    add("pointwise", 1, "same", " ".join(LIBM_UNARY), operands="float")
    add("pointwise", 1, "same", "rsqrt reciprocal erfinv sigmoid", operands="float")
    add("pointwise", 1, "bool", "signbit isinf isnan logical_not")
    add("pointwise", 2, "bool", "logical_and logical_or logical_xor eq ne lt le gt ge")
    add(
        "pointwise",
        2,
        "same",
        """bitwise_and bitwise_or bitwise_xor bitwise_left_shift
        bitwise_right_shift""",
        operands="integer",
    )
    add("pointwise", 1, "same", "bitwise_not", operands="integer")
    add("pointwise", 3, "second", "where")
    return table


OP_SPECS: dict[str, OpSpec] = _specs()
"""The one op table: every op a body may call, by name."""

REDUCTION_TYPES = frozenset(
    {
        "sum",
        "prod",
        "max",
        "min",
        "argmax",
        "argmin",
        "any",
        "xor_sum",
        "welford_reduce",
        "welford_combine",
    }
)
POINTWISE_OPS = frozenset(n for n, s in OP_SPECS.items() if s.kind == "pointwise")
OTHER_OPS = frozenset(n for n, s in OP_SPECS.items() if s.kind != "pointwise")
ALL_OPS = frozenset(OP_SPECS)


def result_dtype(
    name: str, operands: tuple[torch.dtype, ...] = (), dtype: torch.dtype | None = None
) -> torch.dtype | None:
    """The dtype the op table says ``name`` returns, given its operands' dtypes (pointwise) or
    its ``dtype`` argument; None for ops whose result is no value or depends on a buffer/body."""
    rule = OP_SPECS[name].dtype_rule
    if rule == "same":
        return operands[0]
    if rule == "second":
        return operands[1]
    if rule == "bool":
        return torch.bool
    if rule == "argument":
        return dtype
    if rule in ("int64", "float32"):
        return getattr(torch, rule)
    return None


class OpsHandler(Protocol[T]):
    """What every ops handler implements: one method per entry of ``OP_SPECS`` (the contract in
    this module's docstring). ``T`` is the handler's value type (C++ text, a Triton variable, a
    tensor, ...). ``tests`` check each handler covers every op and follows each dtype rule."""

    # memory
    def load(self, name: str, index: Any) -> T: ...
    def store(self, name: str, index: Any, value: T, mode: str | None = None) -> None: ...
    def reduction(
        self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: T
    ) -> Any: ...
    def store_reduction(self, name: str, index: Any, value: T) -> None: ...
    def index_expr(self, expr: Any, dtype: torch.dtype) -> T: ...
    def indirect_indexing(self, value: T, size: Any, check: bool = True) -> Any: ...
    def masked(self, mask: T, body: Callable[[], T], other: Any) -> T: ...
    # constants and conversion
    def constant(self, value: Any, dtype: torch.dtype) -> T: ...
    def to_dtype(self, x: T, dtype: torch.dtype, src_dtype: torch.dtype | None = None) -> T: ...
    def to_dtype_bitcast(self, x: T, dtype: torch.dtype, src_dtype: torch.dtype) -> T: ...
    # random
    def load_seed(self, name: str, offset: Any) -> T: ...
    def rand(self, seed: T, offset: T) -> T: ...
    def randn(self, seed: T, offset: T) -> T: ...
    def randint64(self, seed: T, offset: T, low: T, high: T) -> T: ...
    # pointwise: arithmetic
    def add(self, a: T, b: T) -> T: ...
    def sub(self, a: T, b: T) -> T: ...
    def mul(self, a: T, b: T) -> T: ...
    def truediv(self, a: T, b: T) -> T: ...
    def floordiv(self, a: T, b: T) -> T: ...
    def mod(self, a: T, b: T) -> T: ...
    def remainder(self, a: T, b: T) -> T: ...
    def fmod(self, a: T, b: T) -> T: ...
    def pow(self, a: T, b: T) -> T: ...
    def maximum(self, a: T, b: T) -> T: ...
    def minimum(self, a: T, b: T) -> T: ...
    def atan2(self, a: T, b: T) -> T: ...
    def copysign(self, a: T, b: T) -> T: ...
    def neg(self, a: T) -> T: ...
    def abs(self, a: T) -> T: ...
    def square(self, a: T) -> T: ...
    def reciprocal(self, a: T) -> T: ...
    def sign(self, a: T) -> T: ...
    def relu(self, a: T) -> T: ...
    def floor(self, a: T) -> T: ...
    def ceil(self, a: T) -> T: ...
    def trunc(self, a: T) -> T: ...
    def round(self, a: T) -> T: ...
    # pointwise: math
    def exp(self, a: T) -> T: ...
    def exp2(self, a: T) -> T: ...
    def expm1(self, a: T) -> T: ...
    def log(self, a: T) -> T: ...
    def log2(self, a: T) -> T: ...
    def log10(self, a: T) -> T: ...
    def log1p(self, a: T) -> T: ...
    def sqrt(self, a: T) -> T: ...
    def rsqrt(self, a: T) -> T: ...
    def sin(self, a: T) -> T: ...
    def cos(self, a: T) -> T: ...
    def tan(self, a: T) -> T: ...
    def asin(self, a: T) -> T: ...
    def acos(self, a: T) -> T: ...
    def atan(self, a: T) -> T: ...
    def sinh(self, a: T) -> T: ...
    def cosh(self, a: T) -> T: ...
    def tanh(self, a: T) -> T: ...
    def asinh(self, a: T) -> T: ...
    def acosh(self, a: T) -> T: ...
    def atanh(self, a: T) -> T: ...
    def erf(self, a: T) -> T: ...
    def erfc(self, a: T) -> T: ...
    def erfinv(self, a: T) -> T: ...
    def sigmoid(self, a: T) -> T: ...
    # pointwise: predicates, logic, bits, comparisons, selection
    def signbit(self, a: T) -> T: ...
    def isinf(self, a: T) -> T: ...
    def isnan(self, a: T) -> T: ...
    def logical_and(self, a: T, b: T) -> T: ...
    def logical_or(self, a: T, b: T) -> T: ...
    def logical_xor(self, a: T, b: T) -> T: ...
    def logical_not(self, a: T) -> T: ...
    def bitwise_and(self, a: T, b: T) -> T: ...
    def bitwise_or(self, a: T, b: T) -> T: ...
    def bitwise_xor(self, a: T, b: T) -> T: ...
    def bitwise_not(self, a: T) -> T: ...
    def bitwise_left_shift(self, a: T, b: T) -> T: ...
    def bitwise_right_shift(self, a: T, b: T) -> T: ...
    def eq(self, a: T, b: T) -> T: ...
    def ne(self, a: T, b: T) -> T: ...
    def lt(self, a: T, b: T) -> T: ...
    def le(self, a: T, b: T) -> T: ...
    def gt(self, a: T, b: T) -> T: ...
    def ge(self, a: T, b: T) -> T: ...
    def where(self, cond: T, a: T, b: T) -> T: ...


_handler: contextvars.ContextVar[Any] = contextvars.ContextVar("torchkiln_loop_ir_ops_handler")


class _MissingHandler:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"ops.{name} called with no ops handler installed; wrap the call in "
            "`with set_ops_handler(handler):`"
        )


_MISSING = _MissingHandler()


class _Ops:
    """``ops.add(a, b)`` forwards to the handler installed in the current context."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_handler.get(_MISSING), name)

    def __repr__(self) -> str:
        return f"<ops handler={_handler.get(None)!r}>"


ops = _Ops()


def current_ops_handler() -> Any:
    """The handler installed in this context, or None."""
    return _handler.get(None)


@contextlib.contextmanager
def set_ops_handler(handler: Any) -> Iterator[Any]:
    """Install ``handler`` as the target of ``ops.*`` for the duration of the block."""
    token = _handler.set(handler)
    try:
        yield handler
    finally:
        _handler.reset(token)
