"""Guards on plain Python values: type, identity, constant, length, dict keys, attribute presence."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..source import Source
from .base import CodeContext, Guard, GuardFailure, type_name

__all__ = [
    "ClosureCellMatch",
    "ConstantMatch",
    "DictKeysMatch",
    "HasAttr",
    "IdMatch",
    "LengthMatch",
    "TypeMatch",
    "is_constant",
]

# Values ConstantMatch guards by equality (after an exact type check).
_EQ_TYPES = (int, float, str, bytes, complex, tuple, frozenset, torch.device)
# Values ConstantMatch guards by identity (singletons: None, bools, enum members, dtypes).
_ID_TYPES = (type(None), bool, enum.Enum, torch.dtype)


def is_constant(value: Any) -> bool:
    """True if ConstantMatch accepts ``value`` (immutable scalars, strings, enums, dtypes, devices,
    and tuples/frozensets of those)."""
    if isinstance(value, (tuple, frozenset)):
        return type(value) in (tuple, frozenset) and all(is_constant(v) for v in value)
    return isinstance(value, _ID_TYPES) or type(value) in _EQ_TYPES


def _literal(value: Any) -> bool:
    """Whether repr(value) is valid Python that rebuilds an equal value."""
    if type(value) in (int, str, bool, type(None), bytes):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is tuple:
        return all(_literal(v) for v in value)
    return False


def _object_name(obj: Any) -> str:
    if isinstance(obj, type):
        return type_name(obj)
    qual = getattr(obj, "__qualname__", None)
    if isinstance(qual, str):
        return qual
    return f"<{type_name(type(obj))} object>"


@dataclass(frozen=True)
class TypeMatch(Guard):
    """``type(value) is type_`` (exact type; a subclass fails)."""

    source: Source
    type_: type
    cost = 0

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        return f"{ctx.builtin('type')}({refs[0]}) is {ctx.const(self.type_, 'type')}"

    def failure(self, value: Any) -> GuardFailure | None:
        if type(value) is self.type_:
            return None
        return self._fail(f"type({self.source.expr()})", self.type_, type(value))


@dataclass(frozen=True)
class IdMatch(Guard):
    """``value is obj``: modules, functions, classes, None. Holds ``obj`` so its id stays unique."""

    source: Source
    obj: Any = field(compare=False, repr=False)
    obj_id: int = field(init=False)
    name: str = field(init=False, compare=False)
    cost = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "obj_id", id(self.obj))
        object.__setattr__(self, "name", _object_name(self.obj))

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        if self.obj is None or self.obj is True or self.obj is False:
            return f"{refs[0]} is {self.obj!r}"
        return f"{refs[0]} is {ctx.const(self.obj, 'obj')}"

    def failure(self, value: Any) -> GuardFailure | None:
        if value is self.obj:
            return None
        return self._fail(
            self.source.expr(),
            _IdText(self.name, self.obj_id),
            _IdText(_object_name(value), id(value)),
        )


class _IdText:
    """Reads as ``Linear (id 0x7f...)`` in a failure message."""

    def __init__(self, name: str, obj_id: int):
        self.text = f"{name} (id {obj_id:#x})"

    def __repr__(self) -> str:
        return self.text


def _exact(value: Any) -> bool:
    """Whether ``==`` is too coarse for this constant: it holds a signed zero (``0.0 == -0.0``,
    yet ``1 / x`` differs) or a NaN (``nan != nan``, yet two NaNs of one sign compute the same)."""
    if type(value) is float:
        return value == 0.0 or value != value
    if type(value) is complex:
        return _exact(value.real) or _exact(value.imag)
    if type(value) in (tuple, frozenset):
        return any(_exact(v) for v in value)
    return False


def exact_key(value: Any) -> Any:
    """A hashable key equal for two constants exactly when ConstantMatch treats them as the same:
    the type is part of it, floats compare with their sign bit (``copysign`` reads it, for NaN
    too) and the NaNs of one sign are one value."""
    t = type(value)
    if t is float:
        sign = math.copysign(1.0, value)
        return (float, "nan", sign) if value != value else (float, value, sign)
    if t is complex:
        return (complex, exact_key(value.real), exact_key(value.imag))
    if t is tuple:
        return (tuple, tuple(exact_key(v) for v in value))
    if t is frozenset:
        return (frozenset, frozenset(exact_key(v) for v in value))
    if isinstance(value, _ID_TYPES):
        return (t, id(value))
    return (t, value)


def _constant_holds(value: Any, expected: Any) -> bool:
    if isinstance(expected, _ID_TYPES):
        return value is expected
    if type(value) is not type(expected):
        return False
    if _exact(expected):
        return exact_key(value) == exact_key(expected)
    return bool(value == expected)


@dataclass(frozen=True)
class ConstantMatch(Guard):
    """The value equals a constant, of exactly the same type (``1``, ``1.0`` and ``True`` differ).

    None, bools, enum members and torch.dtype compare by identity; int, float, str, bytes,
    complex, torch.device, and tuples/frozensets of constants by type then ``==``, except that
    floats are exact: ``-0.0`` and ``0.0`` differ (``1 / x`` tells them apart), and a NaN matches
    a NaN of the same sign (``copysign(1, x)`` tells ``nan`` from ``-nan``).
    """

    source: Source
    value: Any
    cost = 1

    def __post_init__(self) -> None:
        if not is_constant(self.value):
            raise TypeError(
                f"ConstantMatch({self.source.expr()}, ...) needs an immutable constant, got "
                f"{type_name(type(self.value))}; guard containers with LengthMatch/DictKeysMatch "
                "plus guards on their items, and other objects with IdMatch or TypeMatch"
            )

    # Two guards are the same guard when they accept the same values (0.0 and -0.0 do not).
    def __eq__(self, other: object) -> bool:
        if type(other) is not ConstantMatch:
            return NotImplemented
        return self.source == other.source and exact_key(self.value) == exact_key(other.value)

    def __hash__(self) -> int:
        return hash((self.source, exact_key(self.value)))

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        v, c = refs[0], self.value
        if c is None or type(c) is bool:
            return f"{v} is {c!r}"
        if isinstance(c, _ID_TYPES):
            return f"{v} is {ctx.const(c, 'const')}"
        type_ref = (
            ctx.builtin(type(c).__name__)
            if type(c).__module__ == "builtins"
            else ctx.const(type(c), "type")
        )
        is_type = f"{ctx.builtin('type')}({v}) is {type_ref}"
        if type(c) is float and (c == 0.0 or c != c):
            value = f"{v} != {v}" if c != c else f"{v} == 0.0"
            sign = ctx.const(math.copysign, "copysign")
            return f"{is_type} and {value} and {sign}(1.0, {v}) == {math.copysign(1.0, c)!r}"
        if _exact(c):  # a signed zero or NaN inside a tuple or complex: the slow exact comparison
            return f"{ctx.const(_constant_holds, 'constant_holds')}({v}, {ctx.const(c, 'const')})"
        const = repr(c) if _literal(c) else ctx.const(c, "const")
        return f"{is_type} and {v} == {const}"

    def failure(self, value: Any) -> GuardFailure | None:
        if _constant_holds(value, self.value):
            return None
        detail = "the sign bits differ" if repr(value) == repr(self.value) else ""
        return self._fail(self.source.expr(), self.value, value, detail)


@dataclass(frozen=True)
class LengthMatch(Guard):
    """``len(value) == n`` for lists, tuples, dicts and other sized containers."""

    source: Source
    n: int
    cost = 2

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        return f"{ctx.builtin('len')}({refs[0]}) == {int(self.n)}"

    def failure(self, value: Any) -> GuardFailure | None:
        n = len(value)
        return None if n == self.n else self._fail(f"len({self.source.expr()})", self.n, n)


@dataclass(frozen=True)
class DictKeysMatch(Guard):
    """The dict's keys, in iteration order, are exactly ``keys``."""

    source: Source
    keys: tuple
    cost = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        keys = repr(self.keys) if _literal(self.keys) else ctx.const(self.keys, "keys")
        return f"{ctx.builtin('tuple')}({refs[0]}) == {keys}"

    def failure(self, value: Any) -> GuardFailure | None:
        keys = tuple(value)
        if keys == self.keys:
            return None
        return self._fail(f"tuple({self.source.expr()}.keys())", self.keys, keys)


@dataclass(frozen=True)
class HasAttr(Guard):
    """``hasattr(value, name)`` is ``present``."""

    source: Source
    name: str
    present: bool = True
    cost = 2

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        test = f"{ctx.builtin('hasattr')}({refs[0]}, {self.name!r})"
        return test if self.present else f"not {test}"

    def failure(self, value: Any) -> GuardFailure | None:
        has = hasattr(value, self.name)
        if has == self.present:
            return None
        return self._fail(f"hasattr({self.source.expr()}, {self.name!r})", self.present, has)


@dataclass(frozen=True)
class ClosureCellMatch(Guard):
    """The closure cell still holds ``value``: by ConstantMatch rules for constants, else by identity.

    A convenience over ConstantMatch/IdMatch on a ClosureSource (``C['name']``).
    """

    source: Source
    value: Any = field(compare=False, repr=False)
    _inner: Guard = field(init=False, repr=False)
    cost = 1

    def __post_init__(self) -> None:
        inner = (
            ConstantMatch(self.source, self.value)
            if is_constant(self.value)
            else IdMatch(self.source, self.value)
        )
        object.__setattr__(self, "_inner", inner)

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        return self._inner.code(refs, ctx)

    def failure(self, value: Any) -> GuardFailure | None:
        fail = self._inner.failure(value)
        return None if fail is None else self._fail(fail.expr, fail.expected, fail.actual)
