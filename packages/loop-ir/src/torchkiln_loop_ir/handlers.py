"""Base ops handlers that other handlers extend, instead of each catching every name itself.

- ``DefaultHandler``: one method per op of ``OP_SPECS``, each forwarding to
  ``default(name, args, kwargs)``. A subclass writes the ops it treats specially as methods and
  the rest in ``default``; ``default_ops`` names the ops ``default`` answers (the others raise
  ``NotImplementedError`` naming the op and the handler). A name outside the op table is an
  ``AttributeError`` like any missing attribute.
- ``NoOpHandler``: every op does nothing and returns None, except that ``masked`` runs its body
  (loads inside it must still be seen), ``reduction`` returns a 3-tuple for the Welford types (as
  the contract says) and ``indirect_indexing`` returns a fresh index symbol. Analyses that record
  a few ops (reads, writes, counts) extend it.
- ``WrapperHandler``: forwards every op to an inner handler; a subclass rewrites arguments of
  the ops it overrides (the kernel builder's simplifying handler rewrites indices). Other
  attributes are the inner handler's, so a name that is no op fails as the inner one reports it.

``missing_ops(cls)`` is what a handler class does not cover: the table's ops that it neither
defines as a method (below ``DefaultHandler``) nor lists in ``default_ops``. The tests ask it of
every handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import sympy

from .indexing import index_symbol
from .ops import ALL_OPS, OP_SPECS, OpsHandler


def _forward(name: str) -> Callable[..., Any]:
    def op(self: DefaultHandler, *args: Any, **kwargs: Any) -> Any:
        return self.default(name, args, kwargs)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``ops.{name}``: answered by ``default`` (arity {OP_SPECS[name].arity})."
    return op


class DefaultHandler(OpsHandler[Any]):
    """Every op forwards to ``default``; subclasses override ops as methods."""

    default_ops: ClassVar[frozenset[str]] = frozenset()

    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no op {name!r}")


for _name in ALL_OPS:
    setattr(DefaultHandler, _name, _forward(_name))
del _name


class NoOpHandler(DefaultHandler):
    """Does nothing for every op; bodies still run through ``masked`` and indirect indices."""

    default_ops = ALL_OPS
    _indirect_prefix: ClassVar[str] = "tmp_ind"

    def __init__(self) -> None:
        self._indirect = 0

    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return None

    def masked(self, mask: Any, body: Callable[[], Any], other: Any) -> Any:
        return body()

    def reduction(self, dtype: Any, src_dtype: Any, reduction_type: str, value: Any) -> Any:
        return (None, None, None) if reduction_type.startswith("welford") else None

    def indirect_indexing(self, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
        sym = index_symbol(self._indirect_prefix, self._indirect)
        self._indirect += 1
        return sym


class WrapperHandler(DefaultHandler):
    """Forwards every op to ``inner``."""

    default_ops = ALL_OPS

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # not an op (those are methods): the inner handler's own attribute, or its own error
        # for a name that is no op (a body's typo surfaces as the backend reports it)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def missing_ops(cls: type) -> list[str]:
    """The ops of the table ``cls`` does not cover (see the module docstring)."""
    defined: set[str] = set()
    for klass in cls.__mro__:
        if klass in (DefaultHandler, OpsHandler) or klass is object:
            continue
        defined.update(
            n for n, v in vars(klass).items() if callable(v) or isinstance(v, staticmethod)
        )
    by_default: frozenset[str] = (
        getattr(cls, "default_ops", frozenset()) if issubclass(cls, DefaultHandler) else frozenset()
    )
    return sorted(ALL_OPS - defined - by_default)
