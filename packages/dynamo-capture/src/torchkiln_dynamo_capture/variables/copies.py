"""``copy.deepcopy(x)`` and ``copy.copy(x)`` of a value known at capture time.

The standard library runs for real on known values (``calls.py``), and what it returns is
wrapped as an object from outside with no source, which may be read but never mutated: capture
could not write a mutation back to it. A copy is different: every call makes new containers and
objects, nothing outside holds them, so they are modelled as built during capture (a list, a
dict, an instance of a plain class: ``ListVariable``, ``DictVariable``, ``NewObjectVariable``).
Mutating them is then tracked, and one that leaves the frame is rebuilt after the graph, a new
one each call, as eager's copy is. transformers deep-copies a flat encoder-decoder config to
take its decoder's half (``get_text_config``: ``copy.deepcopy`` of the config, then of its
``__dict__``, then ``delattr``/``setattr`` on the copy), which broke BART, T5 and Marian into
four graphs.

A shallow copy of a list or dict is a new container of the argument's own items (their
trackers: an item from outside stays that object, written back through its source). A deep copy
runs now; the functions, classes, modules and atoms it shares stay as they are. A copy holding
anything else (a tensor, a set, an object with ``__slots__`` or its own ``__new__``, a mutable
object a ``__deepcopy__`` shared) is not modelled: the caller falls back to the plain rule.
"""

from __future__ import annotations

import collections
import copy
import types
from typing import Any

from .base import ConstantVariable, VariableTracker
from .containers import DictVariable, ListVariable, TupleVariable
from .objects import NewObjectVariable

COPIERS = (copy.copy, copy.deepcopy)

_ATOMS = (int, float, complex, bool, str, bytes, type(None), type(Ellipsis), range, slice)
_SHARED = (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type)


class _NotModelled(Exception):
    pass


def _reachable(value: Any, limit: int = 100_000) -> set[int]:
    """ids of the containers and objects reachable from ``value`` (items, ``__dict__``)."""
    seen: set[int] = set()
    stack = [value]
    while stack and len(seen) < limit:
        v = stack.pop()
        if id(v) in seen or isinstance(v, _ATOMS):
            continue
        seen.add(id(v))
        if isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif hasattr(v, "__dict__") and not isinstance(v, _SHARED):
            stack.extend(vars(v).values())
    return seen


def _plain_class(cls: type) -> bool:
    return (
        cls.__module__ != "builtins"
        and "__slots__" not in cls.__dict__
        and cls.__new__ is object.__new__
        and type(cls).__call__ is type.__call__
    )


def _model(tx, value: Any, before: set[int], made: dict[int, VariableTracker]) -> VariableTracker:
    if id(value) in made:
        return made[id(value)]
    if isinstance(value, _SHARED) or isinstance(value, _ATOMS):
        return tx.wrap(value, None)
    if id(value) in before:
        raise _NotModelled  # a mutable object the deep copy shares (its own __deepcopy__)
    t = type(value)
    if t is tuple:
        return TupleVariable([_model(tx, v, before, made) for v in value])
    if t is list:
        var: VariableTracker = ListVariable([])
        made[id(value)] = var
        var.items = [_model(tx, v, before, made) for v in value]
        return var
    if t is dict or t is collections.OrderedDict:
        if not all(isinstance(k, _ATOMS) for k in value):
            raise _NotModelled
        var = DictVariable({}, None, cls=t)
        made[id(value)] = var
        var.items = {k: _model(tx, v, before, made) for k, v in value.items()}
        return var
    if _plain_class(t) and hasattr(value, "__dict__"):
        obj = NewObjectVariable(t)
        made[id(value)] = obj
        for name, v in vars(value).items():
            obj.attrs[name] = _model(tx, v, before, made)
        return obj
    raise _NotModelled


def copied(tx, fn: Any, arg: VariableTracker, value: Any) -> VariableTracker | None:
    """``fn(arg)`` (``copy.copy`` or ``copy.deepcopy``; ``value``: the argument's value now), its
    new containers and objects modelled as built during capture; None when the copy holds
    something that is not modelled (or raises: the plain rule then reports it).

    A shallow copy of a list or dict is made from the argument's own item trackers, so each item
    is the object the argument holds (the value's items may be capture's copies of them). A deep
    copy runs now: everything it makes is new."""
    if fn is copy.copy:
        if isinstance(arg, ListVariable):
            return ListVariable(list(arg.items))
        if isinstance(arg, DictVariable):
            return DictVariable(dict(arg.items), None, cls=arg.cls)
        return None
    try:
        result = fn(value)
    except Exception:  # noqa: BLE001 - the caller's plain path raises the error as it reports it
        return None
    if isinstance(result, _ATOMS):
        return ConstantVariable(result)
    try:
        return _model(tx, result, _reachable(value), {})
    except _NotModelled:
        return None
