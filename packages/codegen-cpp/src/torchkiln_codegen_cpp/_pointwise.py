"""C++ templates of the pointwise ops: ``{0}``, ``{1}``, ``{2}`` are operands, ``{T}`` the compute
type of the first operand. Each entry is (float template, integer template, result kind), where
result kind is the op's ``dtype_rule`` in loop-ir's op table (``OP_SPECS``): "same" (the first
operand's dtype), "bool", or "second" (``where``: the dtype of the second operand); the
repository's tests/test_ops_contract.py checks they agree."""

from __future__ import annotations

from torchkiln_loop_ir.ops import LIBM_UNARY

from ._vector_math import VECTOR_FLOAT_FUNCTIONS


def _unary_math(fn: str) -> tuple[str, str, str]:
    """Floats through the prelude's ``tk_<fn>`` where ``_vector_math`` lists ``fn`` (one
    implementation for every element: its module docstring), else (sqrt, exact) ``std::``."""
    vector = f"{fn}f" in VECTOR_FLOAT_FUNCTIONS
    return (f"tk_{fn}({{0}})" if vector else f"std::{fn}({{0}})", f"std::{fn}({{0}})", "same")


POINTWISE: dict[str, tuple[str, str, str]] = {
    "add": ("({0} + {1})", "({0} + {1})", "same"),
    "sub": ("({0} - {1})", "({0} - {1})", "same"),
    "mul": ("({0} * {1})", "({0} * {1})", "same"),
    "truediv": ("({0} / {1})", "({0} / {1})", "same"),
    # integer forms report a zero divisor into the call's status word (see _status.py)
    "floordiv": ("tk_floordiv<{T}>({0}, {1})", "tk_floordiv<{T}>({0}, {1}, tk_status)", "same"),
    "mod": ("tk_fmod<{T}>({0}, {1})", "tk_fmod<{T}>({0}, {1}, tk_status)", "same"),
    "remainder": ("tk_remainder<{T}>({0}, {1})", "tk_remainder<{T}>({0}, {1}, tk_status)", "same"),
    "fmod": ("tk_fmod<{T}>({0}, {1})", "tk_fmod<{T}>({0}, {1}, tk_status)", "same"),
    "neg": ("(-{0})", "(-{0})", "same"),
    "abs": ("std::abs({0})", "std::abs({0})", "same"),
    "pow": ("std::pow({0}, {1})", "tk_ipow<{T}>({0}, {1})", "same"),
    "maximum": ("tk_max<{T}>({0}, {1})", "tk_max<{T}>({0}, {1})", "same"),
    "minimum": ("tk_min<{T}>({0}, {1})", "tk_min<{T}>({0}, {1})", "same"),
    "rsqrt": ("({T}(1) / std::sqrt({0}))", "({T}(1) / std::sqrt({0}))", "same"),
    "reciprocal": ("({T}(1) / {0})", "({T}(1) / {0})", "same"),
    "sigmoid": (
        "({T}(1) / ({T}(1) + tk_exp(-{0})))",
        "({T}(1) / ({T}(1) + std::exp(-{0})))",
        "same",
    ),
    "relu": ("tk_relu<{T}>({0})", "tk_relu<{T}>({0})", "same"),
    "sign": ("tk_sign<{T}>({0})", "tk_sign<{T}>({0})", "same"),
    "round": ("std::nearbyint({0})", "{0}", "same"),
    "floor": ("std::floor({0})", "{0}", "same"),
    "ceil": ("std::ceil({0})", "{0}", "same"),
    "trunc": ("std::trunc({0})", "{0}", "same"),
    "erfinv": ("tk_erfinv({0})", "tk_erfinv({0})", "same"),
    "atan2": ("tk_atan2({0}, {1})", "std::atan2({0}, {1})", "same"),
    "copysign": ("std::copysign({0}, {1})", "std::copysign({0}, {1})", "same"),
    "square": ("({0} * {0})", "({0} * {0})", "same"),
    "signbit": ("std::signbit({0})", "({0} < 0)", "bool"),
    "isinf": ("std::isinf({0})", "false", "bool"),
    "isnan": ("std::isnan({0})", "false", "bool"),
    "logical_and": ("(static_cast<bool>({0}) && static_cast<bool>({1}))",) * 2 + ("bool",),
    "logical_or": ("(static_cast<bool>({0}) || static_cast<bool>({1}))",) * 2 + ("bool",),
    "logical_xor": ("(static_cast<bool>({0}) != static_cast<bool>({1}))",) * 2 + ("bool",),
    "logical_not": ("(!static_cast<bool>({0}))",) * 2 + ("bool",),
    "bitwise_and": ("({0} & {1})", "({0} & {1})", "same"),
    "bitwise_or": ("({0} | {1})", "({0} | {1})", "same"),
    "bitwise_xor": ("({0} ^ {1})", "({0} ^ {1})", "same"),
    "bitwise_not": ("(~{0})", "(~{0})", "same"),
    "bitwise_left_shift": ("tk_shl<{T}>({0}, {1})", "tk_shl<{T}>({0}, {1})", "same"),
    "bitwise_right_shift": ("tk_shr<{T}>({0}, {1})", "tk_shr<{T}>({0}, {1})", "same"),
    "eq": ("({0} == {1})", "({0} == {1})", "bool"),
    "ne": ("({0} != {1})", "({0} != {1})", "bool"),
    "lt": ("({0} < {1})", "({0} < {1})", "bool"),
    "le": ("({0} <= {1})", "({0} <= {1})", "bool"),
    "gt": ("({0} > {1})", "({0} > {1})", "bool"),
    "ge": ("({0} >= {1})", "({0} >= {1})", "bool"),
    "where": (
        "tk_where(static_cast<bool>({0}), static_cast<{T}>({1}), static_cast<{T}>({2}))",
        "({0} ? {1} : {2})",
        "second",
    ),
}

# the C math functions of the same name (loop-ir owns the list)
for _fn in LIBM_UNARY:
    POINTWISE[_fn] = _unary_math(_fn)
# (exp: its float overload answers underflowing lanes itself, skipping libmvec's slow ones;
# sin and cos of one value stay two vector calls, not one scalar sincosf: _vector_math.py)

# bool has no ~ or unary minus of its own in torch's sense.
BOOL_OVERRIDES: dict[str, str] = {"bitwise_not": "(!{0})", "neg": "(!{0})", "abs": "{0}"}
