"""The VariableTracker base class, Python constants, the NULL stack marker and bound methods.

The bottom of ``variables/``: it imports no other family. What a tracker cannot decide alone (a
call of a real callable, membership) it asks the translator ``tx`` for (``tx.call_value``,
``tx.contains``), which hands it to ``calls.py`` and ``operators.py``: so the families import each
other in one direction only (``tests/test_variables_layering.py``).
"""

from __future__ import annotations

import types
from typing import Any

from .._sources import AttrSource
from ..exc import Unsupported


class AttrMissing(Exception):
    """A symbolic attribute lookup found nothing (``hasattr``/``getattr(default)`` catch it)."""


class VariableTracker:
    """What capture knows about one Python value; ``source`` says where it came from (for guards)."""

    source = None
    #: a real object (not made during capture) reached with no source: capture cannot say how
    #: the run function would reach it again, so it must not mutate it (see SideEffects)
    untracked_real = False

    def python_type(self) -> type:
        raise Unsupported(f"type() of {type(self).__name__}")

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        raise Unsupported(
            f"{self} used where a Python constant is needed",
            "keep this value known at capture time",
        )

    def real_value(self) -> Any:
        """The real Python object this tracks, if there is one (for identity and isinstance)."""
        return _NO_REAL

    def var_getattr(self, tx, name: str) -> VariableTracker:
        raise Unsupported(f"attribute {name!r} of {type(self).__name__}")

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        raise Unsupported(f"setting attribute {name!r} on {type(self).__name__}")

    def call(self, tx, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(f"calling {type(self).__name__}")

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        return self.var_getattr(tx, name).call(tx, args, kwargs)

    def unpack(self, tx) -> list:
        raise Unsupported(f"iterating over {type(self).__name__}")

    def truth(self, tx) -> bool:
        raise Unsupported(
            f"truth value of {type(self).__name__}", "branch only on values known at capture time"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _NoReal:
    def __repr__(self) -> str:
        return "<no real value>"


_NO_REAL = _NoReal()
NO_REAL = _NO_REAL


class DeletedVariable(VariableTracker):
    """Marks an attribute deleted during capture (``del obj.attr``)."""


class NullVariable(VariableTracker):
    """The NULL that LOAD_GLOBAL/LOAD_ATTR/PUSH_NULL place below a callable."""


class ConstantVariable(VariableTracker):
    """A Python value known at capture time (immutable or treated as such)."""

    def __init__(self, value: Any, source=None):
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def real_value(self) -> Any:
        return self.value

    def var_getattr(self, tx, name: str) -> VariableTracker:
        try:
            v = getattr(self.value, name)
        except AttributeError as e:
            raise AttrMissing(name) from e
        if is_numpy_scalar(self.value) and callable(v):
            return BoundMethodVariable(self, name)  # run by _numpy_scalar_method when called
        # attributes of Python modules (torch.nn, math) are not guarded: they do not change
        src = (
            None
            if isinstance(self.value, types.ModuleType) or self.source is None
            else AttrSource(self.source, name)
        )
        return tx.wrap(v, src)

    def call(self, tx, args, kwargs):
        return tx.call_value(self.value, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        if type(self.value) in (list, dict, set) and name in MUTATORS:
            raise Unsupported(f"mutating a {type(self.value).__name__} held as a constant")
        if is_numpy_scalar(self.value):
            return self._numpy_scalar_method(tx, name, args, kwargs)
        return self.var_getattr(tx, name).call(tx, args, kwargs)

    def _numpy_scalar_method(self, tx, name, args, kwargs):
        """``np.float64(2.5).item()``, ``np.sqrt(2.0).round()``: a numpy scalar is immutable and
        this one is known at capture time, so its method gives the same result on every call
        (a numpy scalar argument is not a constant: it is guarded by type only, and its methods
        break the graph instead)."""
        what = f"{type(self.value).__name__}.{name}()"
        if name in ("tofile", "dump"):
            raise Unsupported(f"{what} writes a file", "it runs in Python between two graphs")
        if not all_constant(args, kwargs):
            raise Unsupported(
                f"{what} on values not known at capture time",
                "it runs in Python between two graphs",
            )
        a, k = constant_values(args, kwargs)
        try:
            result = getattr(self.value, name)(*a, **k)
        except Exception as e:
            raise Unsupported(f"{what} raised {type(e).__name__}: {e}") from e
        if type(result).__name__ == "ndarray" and not is_numpy_scalar(result):
            raise Unsupported(
                f"{what} makes an ndarray (a new mutable array on every call in eager)",
                "it runs in Python between two graphs",
            )
        return ConstantVariable(result) if is_numpy_scalar(result) else tx.wrap(result, None)

    def unpack(self, tx) -> list:
        try:
            items = list(self.value)
        except TypeError as e:
            raise Unsupported(f"iterating over {type(self.value).__name__}") from e
        return [ConstantVariable(v) if not _needs_wrap(v) else tx.wrap(v, None) for v in items]

    def truth(self, tx) -> bool:
        return bool(self.value)

    def __repr__(self) -> str:
        return f"ConstantVariable({self.value!r})"


#: methods that change a list, dict or set in place
MUTATORS = {
    "append",
    "extend",
    "pop",
    "insert",
    "remove",
    "clear",
    "update",
    "setdefault",
    "add",
    "discard",
    "popitem",
    "sort",
    "reverse",
    "difference_update",
    "intersection_update",
    "symmetric_difference_update",
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__ior__",
    "__iand__",
    "__isub__",
    "__ixor__",
    "__imul__",
}


def _needs_wrap(v) -> bool:
    return not isinstance(v, (int, float, str, bool, type(None), bytes, complex))


class BoundMethodVariable(VariableTracker):
    """``obj.name`` for a tracked value whose methods are handled by ``obj.call_method``."""

    def __init__(self, obj: VariableTracker, name: str):
        self.obj = obj
        self.name = name

    def call(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def __repr__(self):
        return f"BoundMethodVariable({self.obj}.{self.name})"


def hashable(value: Any) -> bool:
    """Whether ``value`` can key a dict lookup (a weakref hashes its referent, so a dict raises)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def all_constant(args: list, kwargs: dict) -> bool:
    """Whether every argument of a call is known at capture time."""
    return all(a.is_python_constant() for a in args) and all(
        v.is_python_constant() for v in kwargs.values()
    )


def constant_values(args: list, kwargs: dict) -> tuple[list, dict]:
    """The Python values of a call's arguments (all known at capture time)."""
    return [a.as_python_constant() for a in args], {
        k: v.as_python_constant() for k, v in kwargs.items()
    }


def is_numpy_scalar(value) -> bool:
    """An instance of numpy.generic (``np.float32(1)``), told without importing numpy (an
    optional extra)."""
    return any(c.__name__ == "generic" and c.__module__ == "numpy" for c in type(value).__mro__)
