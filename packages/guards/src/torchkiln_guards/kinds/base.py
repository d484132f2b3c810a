"""The Guard protocol every guard kind implements, and GuardFailure, the reason a check failed."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from ..source import Source

__all__ = ["CodeContext", "Guard", "GuardFailure", "show"]


class CodeContext(Protocol):
    """What a guard's code generator may ask of the compiler."""

    def const(self, obj: object, hint: str) -> str:
        """A name through which the generated code reads ``obj`` (bound in its namespace)."""

    def fresh(self, hint: str) -> str:
        """A new local-variable name, for walrus temporaries inside a guard's expression."""

    def builtin(self, name: str) -> str:
        """How to call builtin ``name`` (``type``, ``len``, ...): its bare name, or a bound alias
        when a parameter of the guarded function shadows it."""


def show(value: Any) -> str:
    """How a value reads in a failure message: types by qualified name, devices as constructors."""
    if isinstance(value, type):
        return type_name(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def type_name(t: type) -> str:
    """``torch.Tensor`` rather than ``torch._tensor.Tensor``; builtins by bare name."""
    mod, name = t.__module__, t.__qualname__
    if mod == "builtins":
        return name
    if mod.startswith("torch") and getattr(torch, name, None) is t:
        return f"torch.{name}"
    if mod.startswith("torch.nn") and getattr(torch.nn, name, None) is t:
        return f"torch.nn.{name}"
    return f"{mod}.{name}"


class Raised:
    """Stands for "reading the value raised": the actual value of a guard that could not be evaluated."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc

    def __repr__(self) -> str:
        return f"<raised {type(self.exc).__name__}: {self.exc}>"


@dataclass(frozen=True)
class GuardFailure:
    """The first guard that failed, where its value came from, and what was expected vs seen.

    ``str(failure)`` reads like ``L['x'].dtype: expected torch.float32, got torch.float16``.
    ``detail`` adds context (e.g. the sizes a symbolic shape relation was evaluated at).
    """

    guard: Guard | None
    expr: str
    expected: Any
    actual: Any
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.expr}: expected {show(self.expected)}, got {show(self.actual)}"
        return f"{text} [{self.detail}]" if self.detail else text


class Guard:
    """A condition on values read from sources that must hold for a cache entry to be reused.

    Subclasses are frozen dataclasses. Each gives:
    - ``sources``: the sources it reads (their values are what ``code``/``failure`` receive);
    - ``cost``: a rank; cheaper and more-likely-to-fail kinds have lower ranks and run first;
    - ``code(refs, ctx)``: one Python boolean expression over ``refs`` (code reading each source);
    - ``failure(*values)``: the slow-path check, None when it holds, else a GuardFailure
      (it must agree with ``code``);
    - ``describe(*values)``: human text, the failure reason, or what the guard checks if it holds.
    """

    cost: ClassVar[int] = 5

    @property
    def sources(self) -> tuple[Source, ...]:
        return (self.source,)  # type: ignore[attr-defined]

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        raise NotImplementedError

    def failure(self, *values: Any) -> GuardFailure | None:
        raise NotImplementedError

    def holds(self, *values: Any) -> bool:
        """Slow-path check on the values of ``sources`` (what the generated code decides)."""
        return self.failure(*values) is None

    def summary(self) -> str:
        """One line naming the guard, used as a comment in the generated source."""
        return f"{type(self).__name__}({', '.join(s.expr() for s in self.sources)})"

    def describe(self, *values: Any) -> str:
        fail = self.failure(*values)
        return str(fail) if fail is not None else f"{self.summary()}: holds"

    def _fail(self, expr: str, expected: Any, actual: Any, detail: str = "") -> GuardFailure:
        return GuardFailure(self, expr, expected, actual, detail)
