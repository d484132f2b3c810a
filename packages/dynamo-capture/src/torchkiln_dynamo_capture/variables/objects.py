"""User-defined objects that exist before capture: attribute reads, methods, properties, stores."""

from __future__ import annotations

import inspect

from .._sources import AttrSource
from ..exc import Unsupported
from .base import AttrMissing, ConstantVariable, DeletedVariable, VariableTracker
from .functions import class_attr, is_data_descriptor, store_through_descriptor, wrap_descriptor

_MISSING = object()


class UserObjectVariable(VariableTracker):
    """A real Python object. Reads go to the object (guarded through ``source``); stores are
    recorded by side_effects and replayed on the object after the graph runs."""

    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def real_value(self):
        return self.value

    def _src(self, name):
        return AttrSource(self.source, name) if self.source is not None else None

    def var_getattr(self, tx, name):
        pending = tx.out.side_effects.attr_value(self.value, name)
        if isinstance(pending, DeletedVariable):
            raise AttrMissing(name)
        if pending is not None:
            return pending
        obj = self.value
        d = getattr(obj, "__dict__", None)
        cls_attr = _MISSING
        for k in type(obj).__mro__:
            if name in k.__dict__:
                cls_attr = k.__dict__[name]
                break
        # data descriptors (properties) win over the instance dict
        if cls_attr is not _MISSING and (isinstance(cls_attr, property) or inspect.isdatadescriptor(cls_attr)) and not _is_slot(cls_attr):
            return wrap_descriptor(tx, self, cls_attr, name, self._src(name))
        if d is not None and name in d:
            return tx.wrap(d[name], self._src(name))
        if cls_attr is not _MISSING:
            return wrap_descriptor(tx, self, cls_attr, name, self._src(name))
        getattr_hook = getattr(type(obj), "__getattr__", None)
        if getattr_hook is not None and not _is_builtin(getattr_hook):
            return tx.call_function(tx.wrap(getattr_hook, None), [self, ConstantVariable(name)], {})
        try:
            v = getattr(obj, name)
        except AttributeError as e:
            raise AttrMissing(name) from e
        return tx.wrap(v, self._src(name))

    def store_attr(self, tx, name, value):
        if store_through_descriptor(tx, self, type(self.value), name, value):
            return
        tx.out.side_effects.store_attr(self, name, value)

    def call(self, tx, args, kwargs):
        if not callable(self.value):
            raise Unsupported(f"calling a {type(self.value).__name__} object")
        call = type(self.value).__call__
        if not inspect.isfunction(call):
            from .builtins import call_value

            return call_value(tx, self.value, args, kwargs)
        return tx.call_function(tx.wrap(call, None), [self, *args], kwargs)

    def unpack(self, tx) -> list:
        return unpack_user_object(tx, self, type(self.value))

    def truth(self, tx):
        if hasattr(type(self.value), "__bool__") or hasattr(type(self.value), "__len__"):
            raise Unsupported(f"truth value of a {type(self.value).__name__} object",
                              "the branch is taken in Python between two graphs; torch.where keeps "
                              "both sides in one graph")
        return True

    def __repr__(self):
        return f"UserObjectVariable({type(self.value).__name__})"


def unpack_user_object(tx, obj: VariableTracker, cls: type) -> list:
    """``list(obj)`` for an instance of a user class: a ``collections.abc.Sequence`` (its mixin
    ``__iter__`` reads ``obj[0]``, ``obj[1]``, ... up to ``len(obj)``: transformers' per-layer
    config view) or a class with its own ``__iter__`` (whatever that returns, unpacked)."""
    import collections.abc

    it = class_attr(cls, "__iter__")
    if it is collections.abc.Sequence.__iter__ and inspect.isfunction(class_attr(cls, "__len__")):
        n = obj.var_getattr(tx, "__len__").call(tx, [], {}).as_python_constant()
        return [tx.getitem(obj, ConstantVariable(i)) for i in range(n)]
    if inspect.isfunction(it):
        return tx.unpack(obj.var_getattr(tx, "__iter__").call(tx, [], {}))
    raise Unsupported(f"iterating over a {cls.__name__} object")


def _is_slot(attr) -> bool:
    return type(attr).__name__ == "member_descriptor"


def _is_builtin(fn) -> bool:
    return not inspect.isfunction(fn)


class NewObjectVariable(VariableTracker):
    """An instance of a user class created during capture; rebuilt after the graph from its attrs."""

    def __init__(self, cls: type):
        self.cls = cls
        self.attrs: dict[str, VariableTracker] = {}

    def python_type(self):
        return self.cls

    def var_getattr(self, tx, name):
        if name == "__class__":
            return ConstantVariable(self.cls)
        attr = class_attr(self.cls, name)
        if is_data_descriptor(attr):  # a property wins over the instance dict, as in Python
            return wrap_descriptor(tx, self, attr, name, None)
        if name in self.attrs:
            return self.attrs[name]
        if attr is not None or any(name in k.__dict__ for k in self.cls.__mro__):
            return wrap_descriptor(tx, self, attr, name, None)
        raise AttrMissing(name)

    def store_attr(self, tx, name, value):
        if store_through_descriptor(tx, self, self.cls, name, value):
            return
        self.attrs[name] = value

    def call(self, tx, args, kwargs):
        return self.var_getattr(tx, "__call__").call(tx, args, kwargs)

    def unpack(self, tx) -> list:
        return unpack_user_object(tx, self, self.cls)

    def truth(self, tx):
        for name in ("__bool__", "__len__"):
            if any(name in k.__dict__ for k in self.cls.__mro__[:-1]):
                r = self.var_getattr(tx, name).call(tx, [], {})
                return bool(r.as_python_constant())
        return True
