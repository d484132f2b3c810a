"""Lists, tuples (incl. namedtuples), dicts, iterators and dataclass instances (incl. ModelOutput)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker


def _const_or_raise(vt, what):
    if not vt.is_python_constant():
        raise Unsupported(f"{what} with a non-constant key")
    return vt.as_python_constant()


class BaseSequence(VariableTracker):
    def __init__(self, items: list, source=None):
        self.items = list(items)
        self.source = source

    def is_python_constant(self):
        return all(i.is_python_constant() for i in self.items)

    def unpack(self, tx):
        return list(self.items)

    def truth(self, tx):
        return bool(self.items)

    def getitem(self, tx, key: VariableTracker):
        k = _const_or_raise(key, "indexing a sequence")
        if isinstance(k, slice):
            return type(self)._new_like(self, self.items[k])
        try:
            return self.items[k]
        except IndexError as e:
            raise Unsupported(f"index {k} out of range") from e

    def var_getattr(self, tx, name):
        from .functions import BoundMethodVariable

        return BoundMethodVariable(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "index":
            v = args[0].as_python_constant()
            return ConstantVariable([i.as_python_constant() if i.is_python_constant() else None for i in self.items].index(v))
        if name == "count":
            v = args[0].as_python_constant()
            return ConstantVariable(sum(1 for i in self.items if i.is_python_constant() and i.as_python_constant() == v))
        raise Unsupported(f"{self.python_type().__name__}.{name}()")


class TupleVariable(BaseSequence):
    """A tuple; ``cls`` is set for namedtuples and torch.return_types (rebuilt as ``cls(*items)``)."""

    def __init__(self, items, source=None, cls: type = tuple):
        super().__init__(items, source)
        self.cls = cls

    @staticmethod
    def _new_like(like, items):
        return TupleVariable(items)

    def python_type(self):
        return self.cls

    def as_python_constant(self):
        vals = tuple(i.as_python_constant() for i in self.items)
        return vals if self.cls is tuple else self.cls(*vals)

    def var_getattr(self, tx, name):
        fields = getattr(self.cls, "_fields", None) or getattr(self.cls, "n_fields", None) and _return_type_fields(self.cls)
        if fields and name in fields:
            return self.items[list(fields).index(name)]
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        fields = getattr(self.cls, "_fields", None)
        if fields is not None and name == "_replace":
            items = list(self.items)
            for k, v in kwargs.items():
                items[fields.index(k)] = v
            return TupleVariable(items, cls=self.cls)
        if fields is not None and name == "_asdict":
            return DictVariable(dict(zip(fields, self.items)))
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self):
        return f"TupleVariable({self.items})"


def _return_type_fields(cls):
    # torch.return_types are structseq: field names are the members' names
    return [n for n in ("values", "indices", "Q", "R", "U", "S", "V", "L", "eigenvalues", "eigenvectors", "mantissa", "exponent", "output", "counts", "inverse_indices") if hasattr(cls, n)]


class ListVariable(BaseSequence):
    """A list. Mutations are applied here; for a list that came from outside they are replayed later."""

    @staticmethod
    def _new_like(like, items):
        return ListVariable(items)

    def python_type(self):
        return list

    def as_python_constant(self):
        return [i.as_python_constant() for i in self.items]

    def call_method(self, tx, name, args, kwargs):
        items = self.items
        if name in ("append", "extend", "insert", "pop", "clear", "remove", "reverse", "__setitem__", "__delitem__", "sort"):
            tx.out.side_effects.mutated(self)
        if name == "append":
            items.append(args[0])
        elif name == "extend":
            items.extend(tx.unpack(args[0]))
        elif name == "insert":
            items.insert(args[0].as_python_constant(), args[1])
        elif name == "pop":
            return items.pop(*(a.as_python_constant() for a in args))
        elif name == "clear":
            items.clear()
        elif name == "reverse":
            items.reverse()
        elif name == "remove":
            v = args[0].as_python_constant()
            for n, i in enumerate(items):
                if i.is_python_constant() and i.as_python_constant() == v:
                    del items[n]
                    break
        elif name == "sort":
            keyed = sorted(items, key=lambda v: v.as_python_constant(), reverse=kwargs.get("reverse", ConstantVariable(False)).as_python_constant())
            items[:] = keyed
        elif name == "copy":
            return ListVariable(items)
        elif name == "__setitem__":
            k = _const_or_raise(args[0], "list assignment")
            if isinstance(k, slice):
                items[k] = tx.unpack(args[1])
            else:
                items[k] = args[1]
        elif name == "__delitem__":
            del items[_const_or_raise(args[0], "list deletion")]
        else:
            return super().call_method(tx, name, args, kwargs)
        return ConstantVariable(None)

    def __repr__(self):
        return f"ListVariable({self.items})"


class DictVariable(VariableTracker):
    """A dict (or OrderedDict) with constant keys; ``cls`` rebuilds it."""

    def __init__(self, items: dict, source=None, cls: type = dict):
        self.items = dict(items)
        self.source = source
        self.cls = cls

    def python_type(self):
        return self.cls

    def is_python_constant(self):
        return all(v.is_python_constant() for v in self.items.values())

    def as_python_constant(self):
        return self.cls((k, v.as_python_constant()) for k, v in self.items.items())

    def unpack(self, tx):
        return [ConstantVariable(k) for k in self.items]

    def truth(self, tx):
        return bool(self.items)

    def var_getattr(self, tx, name):
        from .functions import BoundMethodVariable

        return BoundMethodVariable(self, name)

    def call_method(self, tx, name, args, kwargs):
        items = self.items
        if name in ("__setitem__", "update", "pop", "setdefault", "clear", "__delitem__", "popitem"):
            tx.out.side_effects.mutated(self)
        if name == "__getitem__":
            k = _const_or_raise(args[0], "dict lookup")
            if k not in items:
                raise Unsupported(f"missing dict key {k!r}")
            return items[k]
        if name == "__contains__":
            return ConstantVariable(_const_or_raise(args[0], "dict membership") in items)
        if name == "get":
            k = _const_or_raise(args[0], "dict.get")
            return items.get(k, args[1] if len(args) > 1 else ConstantVariable(None))
        if name in ("keys", "values", "items") and self.cls is dict:
            return DictViewVariable(self, name)
        if name == "keys":
            return TupleVariable([ConstantVariable(k) for k in items])
        if name == "values":
            return TupleVariable(list(items.values()))
        if name == "items":
            return TupleVariable([TupleVariable([ConstantVariable(k), v]) for k, v in items.items()])
        if name == "__len__":
            return ConstantVariable(len(items))
        if name == "copy":
            return DictVariable(items, cls=self.cls)
        if name == "__setitem__":
            items[_const_or_raise(args[0], "dict assignment")] = args[1]
        elif name == "__delitem__":
            del items[_const_or_raise(args[0], "dict deletion")]
        elif name == "update":
            if args:
                other = args[0]
                if isinstance(other, DictVariable):
                    items.update(other.items)
                else:
                    for pair in tx.unpack(other):
                        k, v = tx.unpack(pair)
                        items[k.as_python_constant()] = v
            items.update(kwargs)
        elif name == "pop":
            k = _const_or_raise(args[0], "dict.pop")
            if k in items:
                return items.pop(k)
            if len(args) > 1:
                return args[1]
            raise Unsupported(f"dict.pop of missing key {k!r}")
        elif name == "setdefault":
            k = _const_or_raise(args[0], "dict.setdefault")
            return items.setdefault(k, args[1] if len(args) > 1 else ConstantVariable(None))
        elif name == "clear":
            items.clear()
        else:
            raise Unsupported(f"dict.{name}()")
        return ConstantVariable(None)

    def __repr__(self):
        return f"DictVariable({self.items})"


class DictViewVariable(VariableTracker):
    """``d.keys()`` / ``d.values()`` / ``d.items()``: a live view, reading the dict when used."""

    def __init__(self, dict_var: DictVariable, kind: str):
        self.dict_var = dict_var
        self.kind = kind

    def _items(self) -> list:
        items = self.dict_var.items
        if self.kind == "keys":
            return [ConstantVariable(k) for k in items]
        if self.kind == "values":
            return list(items.values())
        return [TupleVariable([ConstantVariable(k), v]) for k, v in items.items()]

    def python_type(self):
        return type(getattr({}, self.kind)())

    def unpack(self, tx) -> list:
        return self._items()

    def truth(self, tx) -> bool:
        return bool(self.dict_var.items)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__":
            return ConstantVariable(len(self.dict_var.items))
        if name == "__iter__":
            return IteratorVariable(self._items())
        if name == "__contains__":
            if self.kind == "keys":
                return self.dict_var.call_method(tx, "__contains__", args, kwargs)
            from .builtins import contains

            return ConstantVariable(contains(tx, args[0], TupleVariable(self._items())))
        return TupleVariable(self._items()).call_method(tx, name, args, kwargs)

    def __repr__(self):
        return f"DictViewVariable({self.kind})"


class IteratorVariable(VariableTracker):
    """An iterator over items known at capture time (loops are unrolled)."""

    def __init__(self, items: list):
        self.items = list(items)
        self.pos = 0

    def next(self):
        if self.pos >= len(self.items):
            return None
        self.pos += 1
        return self.items[self.pos - 1]

    def unpack(self, tx):
        rest = self.items[self.pos:]
        self.pos = len(self.items)
        return rest


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
        if any(isinstance(f.type, dataclasses.InitVar) for f in getattr(klass, "__dataclass_fields__", {}).values()):
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
        return is_model_output(self.cls) or (not hasattr(self.cls, "__post_init__") and all(f.init for f in fields)
                                             and set(self.fields) == {f.name for f in fields})

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
            return [k for k, v in self.fields.items() if not (v.is_python_constant() and v.as_python_constant() is None)]
        return list(self.fields)

    def var_getattr(self, tx, name):
        if name in self.fields:
            return self.fields[name]
        if name == "__class__":
            return ConstantVariable(self.cls)
        from .functions import BoundMethodVariable, wrap_class_attr

        if name in ("keys", "values", "items", "to_tuple", "get", "__getitem__", "__contains__"):
            return BoundMethodVariable(self, name)
        return wrap_class_attr(tx, self, self.cls, name)

    def store_attr(self, tx, name, value):
        self.fields[name] = value

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            k = args[0].as_python_constant()
            if isinstance(k, str):
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
            return TupleVariable([TupleVariable([ConstantVariable(k), self.fields[k]]) for k in self._keys()])
        if name == "get":
            k = args[0].as_python_constant()
            return self.fields[k] if k in self._keys() else (args[1] if len(args) > 1 else ConstantVariable(None))
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
