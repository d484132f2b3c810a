"""Instances of user classes: objects that exist before capture (attribute reads, methods,
properties, stores), ones built during it, and dataclass instances built during it (incl.
transformers' ModelOutput)."""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import weakref
from typing import Any

import torch
from torchkiln_guards import DictKeysMatch, IdMatch

from .._sources import AttrSource, ItemSource, WeakRefSource
from ..exc import Unsupported
from .base import (
    AttrMissing,
    BoundMethodVariable,
    ConstantVariable,
    DeletedVariable,
    VariableTracker,
)
from .containers import DictVariable, TupleVariable
from .functions import (
    class_attr,
    is_data_descriptor,
    store_through_descriptor,
    wrap_class_attr,
    wrap_descriptor,
)

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
        if name in _DICT_READS and self._reads_as_dict():
            return BoundMethodVariable(self, name)
        mapped = _mapped_by_getattribute(obj, name)
        if mapped is not _MISSING:
            # the class's own __getattribute__ reads another value than the plain lookup
            # below would (an alias name that is also a class attribute): what Python reads,
            # guarded by the same read at run time
            return tx.wrap(mapped, self._src(name))
        d = getattr(obj, "__dict__", None)
        cls_attr = _MISSING
        for k in type(obj).__mro__:
            if name in k.__dict__:
                cls_attr = k.__dict__[name]
                break
        # data descriptors (properties) win over the instance dict
        if (
            cls_attr is not _MISSING
            and (isinstance(cls_attr, property) or inspect.isdatadescriptor(cls_attr))
            and not _is_slot(cls_attr)
        ):
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

    def _reads_as_dict(self) -> bool:
        """A dict subclass from outside (a transformers ModelOutput handed over a graph break)
        whose keys, values and items are dict's own and whose items ``obj[key]`` reads: those
        reads are a snapshot of its items, guarded by its keys (see ``call_method``)."""
        cls = type(self.value)
        return (
            self.source is not None
            and isinstance(self.value, dict)
            and all(isinstance(class_attr(cls, n), _BUILTIN_METHOD) for n in _DICT_READS)
            and (class_attr(cls, "__getitem__") in _DICT_GETITEMS or is_model_output(cls))
        )

    def call_method(self, tx, name, args, kwargs):
        if name not in _DICT_READS or args or kwargs or not self._reads_as_dict():
            return self.var_getattr(tx, name).call(tx, args, kwargs)
        keys = self._guarded_keys(tx)
        if name == "__len__":
            return ConstantVariable(len(keys))
        if name == "keys":
            return TupleVariable([ConstantVariable(k) for k in keys])
        values = [
            tx.wrap(dict.__getitem__(self.value, k), ItemSource(self.source, k)) for k in keys
        ]
        if name == "values":
            return TupleVariable(values)
        return TupleVariable(
            [TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, values)]
        )

    def _guarded_keys(self, tx) -> list:
        """The keys, in order, guarded as they are. The snapshot stands for the live view: a
        store into the object breaks the graph (its ``__setitem__`` is dict's, a builtin), so
        the keys do not change while the snapshot is in use."""
        keys = list(self.value)
        if not all(type(k) is str for k in keys):
            raise Unsupported(f"reading a {type(self.value).__name__} with other than str keys")
        tx.out.guards.append(DictKeysMatch(self.source, tuple(keys)))
        return keys

    def store_attr(self, tx, name, value):
        if not inline_user_setattr(tx, self, type(self.value), name, value):
            self.raw_store_attr(tx, name, value)

    def raw_store_attr(self, tx, name, value):
        """``object.__setattr__(obj, name, value)``: a data descriptor's setter, else the
        instance dict (recorded, replayed on the object after the graph)."""
        if store_through_descriptor(tx, self, type(self.value), name, value):
            return
        tx.out.side_effects.store_attr(self, name, value)

    def call(self, tx, args, kwargs):
        if type(self.value) is weakref.ref and self.source is not None and not args and not kwargs:
            referent = self.value()
            if referent is None or isinstance(referent, torch.Tensor):
                # a weak reference to a tensor (an LSTM's weights): the tensor, read through
                # the reference and identity-guarded there. Other referents (a hook dict behind
                # a RemovableHandle) are still called in Python (variables/calls.py)
                source = WeakRefSource(self.source)
                tx.out.guards.append(IdMatch(source, referent))
                return ConstantVariable(None) if referent is None else tx.wrap(referent, source)
        if not callable(self.value):
            raise Unsupported(f"calling a {type(self.value).__name__} object")
        call = type(self.value).__call__
        if not inspect.isfunction(call):
            return tx.call_value(self.value, args, kwargs)
        return tx.call_function(tx.wrap(call, None), [self, *args], kwargs)

    def unpack(self, tx) -> list:
        if self._reads_as_dict() and isinstance(
            class_attr(type(self.value), "__iter__"), _BUILTIN_METHOD
        ):
            return [ConstantVariable(k) for k in self._guarded_keys(tx)]
        return unpack_user_object(tx, self, type(self.value))

    def truth(self, tx):
        if hasattr(type(self.value), "__bool__") or hasattr(type(self.value), "__len__"):
            raise Unsupported(
                f"truth value of a {type(self.value).__name__} object",
                "the branch is taken in Python between two graphs; torch.where keeps "
                "both sides in one graph",
            )
        return True

    def __repr__(self):
        return f"UserObjectVariable({type(self.value).__name__})"


#: dict reads ``UserObjectVariable`` answers from a snapshot of a dict subclass's items
_DICT_READS = ("keys", "values", "items", "__len__")
_BUILTIN_METHOD = (type(dict.keys), type(dict.__len__))  # method_descriptor, wrapper_descriptor
_DICT_GETITEMS = (dict.__getitem__, collections.OrderedDict.__getitem__)


def unpack_user_object(tx, obj: VariableTracker, cls: type) -> list:
    """``list(obj)`` for an instance of a user class: a ``collections.abc.Sequence`` (its mixin
    ``__iter__`` reads ``obj[0]``, ``obj[1]``, ... up to ``len(obj)``: transformers' per-layer
    config view) or a class with its own ``__iter__`` (whatever that returns, unpacked)."""
    it = class_attr(cls, "__iter__")
    if it is collections.abc.Sequence.__iter__ and inspect.isfunction(class_attr(cls, "__len__")):
        n = obj.var_getattr(tx, "__len__").call(tx, [], {}).as_python_constant()
        return [tx.getitem(obj, ConstantVariable(i)) for i in range(n)]
    if inspect.isfunction(it):
        return tx.unpack(obj.var_getattr(tx, "__iter__").call(tx, [], {}))
    raise Unsupported(f"iterating over a {cls.__name__} object")


def python_override(cls: type, dunder: str) -> Any:
    """``cls``'s ``__setattr__`` / ``__getattribute__`` when one of its classes writes it in
    Python (transformers' configs map alias names there), else None. torch.nn modules' own are
    not run: capture models their attributes itself."""
    method = getattr(cls, dunder, None)
    if not inspect.isfunction(method) or issubclass(cls, torch.nn.Module):
        return None
    return method


def inline_user_setattr(tx, obj: VariableTracker, cls: type, name: str, value) -> bool:
    """``obj.name = value`` through a ``__setattr__`` that ``cls`` writes in Python
    (``config.n_layer = 2`` sets ``num_layers``): inlined, as Python calls it for every store;
    its ``object.__setattr__`` (or ``super().__setattr__``) is ``raw_store_attr``. False when
    there is none (``python_override``)."""
    setter = python_override(cls, "__setattr__")
    if setter is None:
        return False
    tx.call_function(tx.wrap(setter, None), [obj, ConstantVariable(name), value], {})
    return True


def _mapped_by_getattribute(obj, name: str) -> Any:
    """What ``obj.name`` gives when ``type(obj)`` has a ``__getattribute__`` written in Python
    and that differs from ``object.__getattribute__``'s answer (transformers' configs map alias
    names there); ``_MISSING`` otherwise (the plain lookup is right)."""
    if python_override(type(obj), "__getattribute__") is None:
        return _MISSING
    try:
        plain = object.__getattribute__(obj, name)
    except AttributeError:
        plain = _MISSING
    try:
        real = getattr(obj, name)
    except AttributeError:
        return _MISSING
    if plain is real or (inspect.ismethod(real) and inspect.ismethod(plain)):
        return _MISSING
    return real


def _is_slot(attr) -> bool:
    return type(attr).__name__ == "member_descriptor"


def _is_builtin(fn) -> bool:
    return not inspect.isfunction(fn)


class NewObjectVariable(VariableTracker):
    """An instance of a user class created during capture; rebuilt after the graph from its attrs."""

    def __init__(self, cls: type):
        self.cls = cls
        self.attrs: dict[str, VariableTracker] = {}
        #: its ``__dict__``, once read: kept equal to ``attrs`` by the stores and deletes here
        self.dict_view: DictVariable | None = None

    def python_type(self):
        return self.cls

    def var_getattr(self, tx, name):
        if name == "__class__":
            return ConstantVariable(self.cls)
        getter = python_override(self.cls, "__getattribute__")
        if getter is not None:
            # the class's own __getattribute__ decides every read (an alias map): inlined,
            # its object.__getattribute__ / super().__getattribute__ being raw_getattr
            return tx.call_function(tx.wrap(getter, None), [self, ConstantVariable(name)], {})
        return self.raw_getattr(tx, name)

    def raw_getattr(self, tx, name):
        """``object.__getattribute__(obj, name)``: a data descriptor, ``attrs``, the class."""
        if name == "__dict__" and "__dict__" not in self.attrs:
            # the attributes as a dict, to read (a config's ``to_dict`` deep-copies it): attribute
            # stores and deletes keep it current; a write through it breaks the graph (an
            # untracked dict), and handed back to Python it is the object's own ``__dict__``
            if self.dict_view is None:
                self.dict_view = DictVariable(dict(self.attrs))
                self.dict_view.untracked_real = True
                self.dict_view.dict_of = self
            return self.dict_view
        attr = class_attr(self.cls, name)
        if is_data_descriptor(attr):  # a property wins over the instance dict, as in Python
            return wrap_descriptor(tx, self, attr, name, None)
        if name in self.attrs:
            return self.attrs[name]
        if attr is not None or any(name in k.__dict__ for k in self.cls.__mro__):
            return wrap_descriptor(tx, self, attr, name, None)
        raise AttrMissing(name)

    def store_attr(self, tx, name, value):
        if not inline_user_setattr(tx, self, self.cls, name, value):
            self.raw_store_attr(tx, name, value)

    def raw_store_attr(self, tx, name, value):
        """``object.__setattr__(obj, name, value)``: a data descriptor's setter, else ``attrs``."""
        if store_through_descriptor(tx, self, self.cls, name, value):
            return
        self.attrs[name] = value
        if self.dict_view is not None:
            self.dict_view.items[name] = value

    def delete_attr(self, tx, name):
        """``delattr(obj, name)`` of an instance attribute; a class's own ``__delattr__`` or a
        descriptor's deleter is not modelled, and a missing attribute raises in eager."""
        if python_override(self.cls, "__delattr__") is not None or is_data_descriptor(
            class_attr(self.cls, name)
        ):
            raise Unsupported(f"delattr of {name!r} on a {self.cls.__name__} (its own deleter)")
        if name not in self.attrs:
            raise Unsupported(
                f"delattr of {name!r}, which a {self.cls.__name__} made during capture lacks",
                "it runs in Python, which raises eager's AttributeError",
            )
        del self.attrs[name]
        if self.dict_view is not None:
            del self.dict_view.items[name]

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


def is_model_output(cls: type) -> bool:
    return any(k.__name__ == "ModelOutput" for k in cls.__mro__) and dataclasses.is_dataclass(cls)


def _own_dunders(cls) -> set:
    """Dunders a user wrote on ``cls`` itself rather than ones dataclasses generated (those are
    compiled from source text by ``exec``: their code's file is ``<string>``, in 3.11 and 3.12)."""
    own = set()
    for name in ("__eq__",):
        fn = cls.__dict__.get(name)
        code = getattr(fn, "__code__", None)
        if fn is not None and (code is None or code.co_filename != "<string>"):
            own.add(name)
    return own


class DataclassVariable(VariableTracker):
    """An instance of a dataclass built during capture; rebuilt after the graph as ``cls(**fields)``.

    transformers' ModelOutput (an OrderedDict subclass dataclass) is one: its keys are the fields
    that are not None, and it indexes by position or name.
    """

    def __init__(self, cls: type, fields: dict[str, VariableTracker]):
        self.cls = cls
        self.fields = fields
        self.source = None

    @classmethod
    def create(cls, tx, klass, args, kwargs) -> DataclassVariable:
        if any(
            isinstance(f.type, dataclasses.InitVar)
            for f in getattr(klass, "__dataclass_fields__", {}).values()
        ):
            raise Unsupported(f"constructing {klass.__name__}, a dataclass with InitVar fields")
        names = [f.name for f in dataclasses.fields(klass) if f.init]
        values: dict[str, Any] = {}
        for n, a in zip(names, args):
            values[n] = a
        values.update(kwargs)
        for f in dataclasses.fields(klass):
            if f.name in values:
                continue
            if f.default is not dataclasses.MISSING:
                values[f.name] = tx.wrap(f.default, None)
            elif f.default_factory is not dataclasses.MISSING:
                values[f.name] = tx.wrap(f.default_factory(), None)
            elif f.init:
                raise Unsupported(f"{klass.__name__}() missing field {f.name!r}")
            # a field with init=False and no default is set by __post_init__ (or never)
        var = cls(klass, values)
        post_init = getattr(klass, "__post_init__", None)
        if post_init is not None and not is_model_output(klass):
            tx.call_function(tx.wrap(post_init, None), [var], {})
        return var

    @property
    def rebuilt_by_init(self) -> bool:
        """Whether ``cls(**fields)`` rebuilds it after the graph; otherwise its fields are set on a
        bare instance (``__post_init__`` already ran here and must not run twice)."""
        fields = dataclasses.fields(self.cls)
        return is_model_output(self.cls) or (
            not hasattr(self.cls, "__post_init__")
            and all(f.init for f in fields)
            and set(self.fields) == {f.name for f in fields}
        )

    def equals(self, other) -> bool | None:
        """The generated ``__eq__`` on values known at capture time (None: not decidable here)."""
        params = getattr(self.cls, "__dataclass_params__", None)
        if params is None or not params.eq or "__eq__" in _own_dunders(self.cls):
            return None
        if other.cls is not self.cls:
            return False
        names = [f.name for f in dataclasses.fields(self.cls) if f.compare]
        mine = [self.fields.get(n) for n in names]
        theirs = [other.fields.get(n) for n in names]
        if not all(v is not None and v.is_python_constant() for v in mine + theirs):
            return None
        return [v.as_python_constant() for v in mine] == [v.as_python_constant() for v in theirs]

    def python_type(self):
        return self.cls

    def _keys(self):
        if is_model_output(self.cls):
            return [
                k
                for k, v in self.fields.items()
                if not (v.is_python_constant() and v.as_python_constant() is None)
            ]
        return list(self.fields)

    def var_getattr(self, tx, name):
        if name in self.fields:
            return self.fields[name]
        if name == "__class__":
            return ConstantVariable(self.cls)
        if name in ("keys", "values", "items", "to_tuple", "get", "__getitem__", "__contains__"):
            return BoundMethodVariable(self, name)
        return wrap_class_attr(tx, self, self.cls, name)

    def store_attr(self, tx, name, value):
        if is_model_output(self.cls):
            name = self._model_output_key(tx, name)
            self._check_model_output_store(name, value)
        self.fields[name] = value

    def _model_output_key(self, tx, key: str) -> str:
        """The key a ModelOutput's ``__setattr__``/``__setitem__``/``__getitem__`` use for ``key``:
        transformers renames old names (``past_key_values`` to ``cache``) in a method of its own,
        inlined here."""
        if not hasattr(self.cls, "_replace_old_cache_name"):
            return key
        remap = self.var_getattr(tx, "_replace_old_cache_name")
        return remap.call(tx, [ConstantVariable(key)], {}).as_python_constant()

    def _check_model_output_store(self, name, value) -> None:
        """A ModelOutput's keys are its fields that are not None, in field order (``_keys``), as
        long as a store keeps them so; a store that would not breaks the graph."""
        names = [f.name for f in dataclasses.fields(self.cls)]
        if name not in names:
            raise Unsupported(f"storing {name!r}, not a field, into a {self.cls.__name__}")
        is_none = value.is_python_constant() and value.as_python_constant() is None
        present = name in self._keys()
        if is_none and present:
            # eager keeps the key and its old value while the attribute becomes None
            raise Unsupported(f"setting {self.cls.__name__}.{name}, a key, to None")
        if (
            not is_none
            and not present
            and any(k in self._keys() for k in names[names.index(name) :])
        ):
            # eager appends the key after fields that come later in field order
            raise Unsupported(f"adding {name!r} to a {self.cls.__name__} after later fields")

    def call_method(self, tx, name, args, kwargs):
        if name == "__setitem__" and is_model_output(self.cls) and not kwargs:
            self.store_attr(tx, args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        if name == "__getitem__":
            k = args[0].as_python_constant()
            if isinstance(k, str):
                if is_model_output(self.cls):
                    k = self._model_output_key(tx, k)
                    if k not in self._keys():  # a field that is None is not a key: KeyError
                        raise Unsupported(f"{self.cls.__name__}[{k!r}]: not a key")
                return self.fields[k]
            keys = self._keys()
            if isinstance(k, slice):
                return TupleVariable([self.fields[n] for n in keys[k]])
            return self.fields[keys[k]]
        if name == "to_tuple":
            return TupleVariable([self.fields[k] for k in self._keys()])
        if name == "keys":
            return TupleVariable([ConstantVariable(k) for k in self._keys()])
        if name == "values":
            return TupleVariable([self.fields[k] for k in self._keys()])
        if name == "items":
            return TupleVariable(
                [TupleVariable([ConstantVariable(k), self.fields[k]]) for k in self._keys()]
            )
        if name == "get":
            k = args[0].as_python_constant()
            return (
                self.fields[k]
                if k in self._keys()
                else (args[1] if len(args) > 1 else ConstantVariable(None))
            )
        if name == "__contains__":
            return ConstantVariable(args[0].as_python_constant() in self._keys())
        if name == "__len__":
            return ConstantVariable(len(self._keys()))
        return self.var_getattr(tx, name).call(tx, args, kwargs)

    def unpack(self, tx):
        if is_model_output(self.cls):
            return [ConstantVariable(k) for k in self._keys()]
        raise Unsupported(f"iterating over dataclass {self.cls.__name__}")

    def truth(self, tx):
        return True
