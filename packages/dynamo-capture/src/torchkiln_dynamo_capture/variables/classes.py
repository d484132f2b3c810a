"""Class construction: ``cls(*args, **kwargs)`` for a class known at capture time.

Builtin classes follow the builtin table; torch.nn modules without state, dataclasses and
namedtuples are built symbolically; classes of the standard library and torch are made at capture
time from constants (or are graph calls on tensors); a plain user class becomes a
``NewObjectVariable`` whose ``__init__`` is inlined. Anything else (a custom ``__new__``, a
metaclass with its own ``__call__``, an abstract class) runs in Python.
"""

from __future__ import annotations

import dataclasses
import inspect

import torch

from ..exc import Unsupported
from .base import VariableTracker, all_constant, constant_values
from .builtins import BUILTIN_HANDLERS
from .containers import DictVariable, ListVariable, TupleVariable
from .modules import NewModuleVariable
from .objects import DataclassVariable, NewObjectVariable
from .tensors import has_tensor


def construct(tx, cls: type, args, kwargs) -> VariableTracker:
    """``cls(*args, **kwargs)`` for a class known at capture time."""
    if cls in BUILTIN_HANDLERS:
        return BUILTIN_HANDLERS[cls](tx, *args, **kwargs)
    if issubclass(cls, torch.nn.Module):
        return _stateless_module(tx, cls, args, kwargs)
    if issubclass(cls, torch.nn.Parameter):
        # a graph value cannot be one: eager's parameter is a new leaf of its own (its .grad
        # fills on backward, it is returned as an nn.Parameter), which only Python makes
        raise Unsupported(
            f"creating a parameter ({cls.__name__}) inside a captured function",
            "it is made in Python; the graph after it takes it as an input",
        )
    if dataclasses.is_dataclass(cls):
        return DataclassVariable.create(tx, cls, args, kwargs)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        names = list(cls._fields)
        vals = list(args) + [None] * (len(names) - len(args))
        for k, v in kwargs.items():
            vals[names.index(k)] = v
        for i, v in enumerate(vals):
            if v is None:
                d = cls._field_defaults.get(names[i], inspect.Parameter.empty)
                if d is inspect.Parameter.empty:
                    raise Unsupported(f"{cls.__name__}() missing {names[i]!r}")
                vals[i] = tx.wrap(d, None)
        return TupleVariable(vals, cls=cls)
    outside = [
        v
        for v in (*args, *kwargs.values())
        if isinstance(v, (ListVariable, DictVariable)) and getattr(v, "source", None) is not None
    ]
    if outside and cls.__module__ != "builtins":
        # made now from constants, it would hold capture's copy of that list or dict, not the
        # object itself (RemovableHandle keeps a weak reference to a module's hook dict: the
        # copy died, and handle.remove() removed nothing)
        raise Unsupported(
            f"constructing {cls.__qualname__} from a {outside[0].python_type().__name__} "
            "that existed before the call",
            "it is made in Python, holding the object itself",
        )
    if all_constant(args, kwargs) and (
        cls.__module__ in ("builtins", "torch", "operator", "functools", "contextlib")
        or cls.__module__.startswith(("torch.", "enum", "collections"))
    ):
        a, k = constant_values(args, kwargs)
        return tx.wrap(cls(*a, **k), None)
    if cls.__module__ == "builtins" or cls.__module__.startswith("torch"):
        if has_tensor(args) or has_tensor(kwargs.values()):
            return tx.out.call_tensor_op(tx, "call_function", cls, args, kwargs)
        raise Unsupported(f"constructing {cls.__name__} from values not known at capture time")
    if cls.__new__ is not object.__new__ or type(cls).__call__ is not type.__call__:
        # a metaclass that only adds class-level behaviour (abc.ABCMeta: transformers' cache
        # layers, collections.abc bases) makes instances as type does; one with its own
        # __call__, or a custom __new__, may return anything
        raise Unsupported(f"constructing {cls.__qualname__} (custom __new__ or metaclass)")
    if getattr(cls, "__abstractmethods__", None):
        raise Unsupported(
            f"constructing {cls.__qualname__}, an abstract class",
            "it runs in Python, which raises eager's TypeError",
        )
    obj = NewObjectVariable(cls)
    init = cls.__init__
    if init is not object.__init__:
        tx.call_function(tx.wrap(init, None), [obj, *args], kwargs)
    return obj


def _stateless_module(tx, cls: type, args, kwargs) -> VariableTracker:
    """``torch.nn.CrossEntropyLoss()``, ``nn.GELU()``, ... made inside a forward (transformers'
    heads build their loss this way): a torch.nn module with constant arguments and no parameters
    or buffers is made at capture time and inlined; its calls are its forward, as in eager. So is
    a subclass whose ``__init__`` is a torch.nn class's (transformers' ``SiLUActivation``, which
    its ``ACT2FN[...]`` makes in Mamba's forward): making it runs no code of the user's, so
    making it once at capture time does what eager's making it on every call does."""
    if not _made_by_torch_nn(cls) or not all_constant(args, kwargs):
        raise Unsupported(f"creating a {cls.__name__} module inside a captured function")
    a, k = constant_values(args, kwargs)
    try:
        # made to look at, not kept when it has state: its weight initialisation must not draw
        # from the generator, or the eager run of the line after the break draws other numbers
        # than eager does (torch.manual_seed(0) before the call would not repeat eager's weights)
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=cuda):
            module = cls(*a, **k)
    except Exception as e:
        raise Unsupported(f"creating a {cls.__name__} module raised {type(e).__name__}: {e}") from e
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        raise Unsupported(
            f"creating a {cls.__name__} module (with parameters or buffers) inside a "
            "captured function",
            "create it in __init__ so its weights persist",
        )
    tx.out.keepalive.append(module)
    return NewModuleVariable(module, a, k)


def _made_by_torch_nn(cls: type) -> bool:
    """Whether ``cls()`` runs only torch.nn's code: a torch.nn class, or a subclass none of whose
    classes outside torch.nn defines ``__init__`` or ``__new__``."""
    if (cls.__module__ or "").startswith("torch.nn."):
        return True
    for k in cls.__mro__:
        if "__init__" in k.__dict__ or "__new__" in k.__dict__:
            return (k.__module__ or "").startswith("torch.nn.")
    return False
