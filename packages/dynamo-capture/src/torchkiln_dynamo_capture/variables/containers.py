"""Lists, tuples (incl. namedtuples and torch.return_types), dicts and their views, iterators."""

from __future__ import annotations

from ..exc import Unsupported
from .base import BoundMethodVariable, ConstantVariable, VariableTracker


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
        return BoundMethodVariable(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "index":
            v = args[0].as_python_constant()
            return ConstantVariable(
                [
                    i.as_python_constant() if i.is_python_constant() else None for i in self.items
                ].index(v)
            )
        if name == "count":
            v = args[0].as_python_constant()
            return ConstantVariable(
                sum(1 for i in self.items if i.is_python_constant() and i.as_python_constant() == v)
            )
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
        fields = (
            getattr(self.cls, "_fields", None)
            or getattr(self.cls, "n_fields", None)
            and _return_type_fields(self.cls)
        )
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
    return [
        n
        for n in (
            "values",
            "indices",
            "Q",
            "R",
            "U",
            "S",
            "V",
            "L",
            "eigenvalues",
            "eigenvectors",
            "mantissa",
            "exponent",
            "output",
            "counts",
            "inverse_indices",
        )
        if hasattr(cls, n)
    ]


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
        if name in (
            "append",
            "extend",
            "insert",
            "pop",
            "clear",
            "remove",
            "reverse",
            "__setitem__",
            "__delitem__",
            "sort",
        ):
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
            keyed = sorted(
                items,
                key=lambda v: v.as_python_constant(),
                reverse=kwargs.get("reverse", ConstantVariable(False)).as_python_constant(),
            )
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
        return BoundMethodVariable(self, name)

    def call_method(self, tx, name, args, kwargs):
        items = self.items
        if name in (
            "__setitem__",
            "update",
            "pop",
            "setdefault",
            "clear",
            "__delitem__",
            "popitem",
        ):
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
            return TupleVariable(
                [TupleVariable([ConstantVariable(k), v]) for k, v in items.items()]
            )
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
            return ConstantVariable(tx.contains(args[0], TupleVariable(self._items())))
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
        rest = self.items[self.pos :]
        self.pos = len(self.items)
        return rest
