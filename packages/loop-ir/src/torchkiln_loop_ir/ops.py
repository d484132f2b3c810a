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
from collections.abc import Iterator
from typing import Any

REDUCTION_TYPES = frozenset(
    {"sum", "prod", "max", "min", "argmax", "argmin", "any", "xor_sum", "welford_reduce",
     "welford_combine"}
)

POINTWISE_OPS = frozenset(
    """
    add sub mul truediv floordiv mod remainder neg abs pow maximum minimum
    exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos atan atan2
    sinh cosh tanh asinh acosh atanh erf erfc erfinv sigmoid relu sign floor ceil trunc round
    fmod copysign signbit isinf isnan logical_and logical_or logical_xor logical_not
    bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift
    eq ne lt le gt ge where square
    """.split()  # noqa: SIM905 (the docstring's word list, kept readable)
)

OTHER_OPS = frozenset(
    """
    load store reduction store_reduction index_expr indirect_indexing masked
    constant to_dtype to_dtype_bitcast load_seed rand randn randint64
    """.split()  # noqa: SIM905 (the docstring's word list, kept readable)
)

ALL_OPS = POINTWISE_OPS | OTHER_OPS

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
