"""The builtin table: what calling ``len``, ``isinstance``, ``getattr``, ``zip``, ``min``, ``list``,
``super``, ... on tracked values does (``BUILTIN_HANDLERS``, read by ``calls.call_value`` and,
for the builtin classes, ``classes.construct``)."""

from __future__ import annotations

import collections
import functools
import operator

import torch
from torchkiln_guards import HasAttr

from ..exc import Unsupported
from .base import NO_REAL, AttrMissing, ConstantVariable, all_constant, constant_values
from .containers import DictVariable, IteratorVariable, ListVariable, TupleVariable
from .functions import PartialVariable, SuperVariable, UserFunctionVariable
from .numpy_arrays import NumpyNdarrayVariable
from .numpy_calls import numpy_operator
from .operators import binary_op
from .symbolic import SymNodeVariable, sym_min_max
from .tensors import TensorVariable


def _len(tx, x):
    if isinstance(x, (ListVariable, TupleVariable)):
        return ConstantVariable(len(x.items))
    if isinstance(x, TensorVariable):
        return ConstantVariable(x.fake.shape[0])
    if x.is_python_constant():
        return ConstantVariable(len(x.as_python_constant()))
    return x.call_method(tx, "__len__", [], {})


def _isinstance(tx, obj, cls):
    c = cls.as_python_constant()
    t = obj.python_type()
    if t is torch.Tensor and isinstance(obj, TensorVariable):
        return ConstantVariable(
            issubclass(obj.cls, c)
            if isinstance(c, type)
            else any(issubclass(obj.cls, k) for k in c)
        )
    real = obj.real_value()
    if real is not NO_REAL:
        return ConstantVariable(isinstance(real, c))
    return ConstantVariable(
        issubclass(t, c) if isinstance(c, type) else any(issubclass(t, k) for k in c)
    )


def _getattr(tx, obj, name, default=None):
    try:
        return tx.getattr(obj, name.as_python_constant())
    except AttrMissing:
        if default is None:
            raise Unsupported(f"getattr: missing attribute {name.as_python_constant()!r}") from None
        return default


def _hasattr(tx, obj, name):
    try:
        tx.getattr(obj, name.as_python_constant())
        found = True
    except AttrMissing:
        found = False
    if obj.source is not None and not isinstance(obj, TensorVariable):
        tx.out.guards.append(HasAttr(obj.source, name.as_python_constant(), found))
    return ConstantVariable(found)


def _setattr(tx, obj, name, value):
    obj.store_attr(tx, name.as_python_constant(), value)
    return ConstantVariable(None)


def _delattr(tx, obj, name):
    deleter = getattr(obj, "delete_attr", None)
    if deleter is None:
        raise Unsupported(
            f"delattr on a {obj.python_type().__name__}",
            "it runs in Python between two graphs",
        )
    deleter(tx, name.as_python_constant())
    return ConstantVariable(None)


def _fromkeys(cls):
    """``dict.fromkeys(keys, value=None)``: a new dict, built during capture (run at capture
    time it would be a real dict no later mutation could reach); every key holds ``value``
    itself, one object, as in eager."""

    def handler(tx, keys, value=None):
        value = ConstantVariable(None) if value is None else value
        return DictVariable({k.as_python_constant(): value for k in tx.unpack(keys)}, cls=cls)

    return handler


def _iter_builtin(fn):
    def handler(tx, *args, **kwargs):
        if fn is enumerate:
            start = kwargs.get(
                "start", args[1] if len(args) > 1 else ConstantVariable(0)
            ).as_python_constant()
            return IteratorVariable(
                [
                    TupleVariable([ConstantVariable(i + start), v])
                    for i, v in enumerate(tx.unpack(args[0]))
                ]
            )
        if fn is zip:
            return IteratorVariable(
                [TupleVariable(list(t)) for t in zip(*(tx.unpack(a) for a in args))]
            )
        if fn is reversed:
            return IteratorVariable(list(reversed(tx.unpack(args[0]))))
        if fn is iter:
            return IteratorVariable(tx.unpack(args[0]))
        if fn is map:
            return IteratorVariable(
                [
                    tx.call_function(args[0], list(t), {})
                    for t in zip(*(tx.unpack(a) for a in args[1:]))
                ]
            )
        if fn is filter:
            return IteratorVariable(
                [
                    v
                    for v in tx.unpack(args[1])
                    if tx.truth(
                        tx.call_function(args[0], [v], {})
                        if not (
                            args[0].is_python_constant() and args[0].as_python_constant() is None
                        )
                        else v
                    )
                ]
            )
        raise AssertionError(fn)

    return handler


def _seq_ctor(kind):
    def handler(tx, *args):
        items = tx.unpack(args[0]) if args else []
        return ListVariable(items) if kind is list else TupleVariable(items)

    return handler


def _dict_ctor(cls):
    def handler(tx, *args, **kwargs):
        d = DictVariable({}, cls=cls)
        if args:
            if isinstance(args[0], DictVariable):
                d.items.update(args[0].items)
            else:
                for pair in tx.unpack(args[0]):
                    k, v = tx.unpack(pair)
                    d.items[k.as_python_constant()] = v
        d.items.update(kwargs)
        return d

    return handler


def _reduce(fn):
    def handler(tx, *args, **kwargs):
        if fn is sum and len(args) == 2:
            kwargs = {"start": args[1], **kwargs}
            args = args[:1]
        items = tx.unpack(args[0]) if len(args) == 1 else list(args)
        if (
            fn in (min, max) and not kwargs
        ):  # before the constant path, which would specialize a size
            symbolic = sym_min_max(tx, fn, items)
            if symbolic is not None:
                return symbolic
        # a symbolic int counts as a constant elsewhere (it specializes when read); a sum keeps it
        # symbolic (the ints of a list handed over a graph break, automatic dynamic)
        summing_symbols = fn is sum and any(isinstance(i, SymNodeVariable) for i in items)
        if (
            not summing_symbols
            and all(i.is_python_constant() for i in items)
            and all_constant([], kwargs)
        ):
            _, k = constant_values([], kwargs)
            return tx.wrap(fn([i.as_python_constant() for i in items], **k), None)
        if fn is sum:
            acc = kwargs.get("start", args[1] if len(args) > 1 else ConstantVariable(0))
            for i in items:
                acc = binary_op(tx, operator.add, acc, i)
            return acc
        raise Unsupported(f"{fn.__name__}() over values not known at capture time")

    return handler


def _bool(tx, x=None):
    return ConstantVariable(False if x is None else tx.truth(x))


def _numeric(cls):
    def handler(tx, *args, **kwargs):
        if all_constant(args, kwargs):
            a, k = constant_values(args, kwargs)
            return ConstantVariable(cls(*a, **k))
        raise Unsupported(
            f"{cls.__name__}() of a value not known at capture time (e.g. a tensor)",
            "keep tensor values as tensors inside the captured function",
        )

    return handler


def _abs(tx, x):
    if isinstance(x, TensorVariable):
        return tx.out.call_tensor_op(tx, "call_function", torch.abs, [x], {})
    if isinstance(x, NumpyNdarrayVariable):
        return numpy_operator(tx, operator.abs, [x])
    return ConstantVariable(abs(x.as_python_constant()))


def _type(tx, x):
    return ConstantVariable(x.python_type())


def _super(tx, *args):
    if args:
        return SuperVariable(args[0].as_python_constant(), args[1])
    return tx.zero_arg_super()


def _callable(tx, x):
    real = x.real_value()
    if real is not NO_REAL:
        return ConstantVariable(callable(real))
    return ConstantVariable(
        isinstance(x, (UserFunctionVariable, PartialVariable)) or callable(x.python_type())
    )


def _next(tx, it, *default):
    if not isinstance(it, IteratorVariable):
        raise Unsupported("next() on a non-iterator")
    v = it.next()
    if v is None:
        if default:
            return default[0]
        raise Unsupported("next() on an exhausted iterator (StopIteration)")
    return v


def _id(tx, x):
    real = x.real_value()
    # a value built during capture has no object yet: the tracker's identity stands in for it
    return ConstantVariable(id(x) if real is NO_REAL else id(real))


def _partial(tx, fn, *args, **kwargs):
    return PartialVariable(fn, args, kwargs)


def _any_all(fn):
    def handler(tx, x):
        return ConstantVariable(fn(tx.truth(i) for i in tx.unpack(x)))

    return handler


def _sorted(tx, x, **kwargs):
    items = tx.unpack(x)
    _, k = constant_values([], kwargs)
    return ListVariable(
        [ConstantVariable(v) for v in sorted((i.as_python_constant() for i in items), **k)]
    )


def _issubclass(tx, a, b):
    return ConstantVariable(issubclass(a.as_python_constant(), b.as_python_constant()))


def _isinstance_check(tx, x):
    return ConstantVariable(isinstance(x, TensorVariable))


def _vars(tx, x):
    return tx.getattr(x, "__dict__")


BUILTIN_HANDLERS = {
    vars: _vars,
    len: _len,
    isinstance: _isinstance,
    issubclass: _issubclass,
    getattr: _getattr,
    hasattr: _hasattr,
    setattr: _setattr,
    delattr: _delattr,
    enumerate: _iter_builtin(enumerate),
    zip: _iter_builtin(zip),
    reversed: _iter_builtin(reversed),
    iter: _iter_builtin(iter),
    map: _iter_builtin(map),
    filter: _iter_builtin(filter),
    list: _seq_ctor(list),
    tuple: _seq_ctor(tuple),
    dict: _dict_ctor(dict),
    min: _reduce(min),
    max: _reduce(max),
    sum: _reduce(sum),
    any: _any_all(any),
    all: _any_all(all),
    bool: _bool,
    int: _numeric(int),
    float: _numeric(float),
    abs: _abs,
    type: _type,
    super: _super,
    callable: _callable,
    next: _next,
    id: _id,
    functools.partial: _partial,
    sorted: _sorted,
    torch.is_tensor: _isinstance_check,
}


# code asking "am I being compiled?" takes its compile-friendly path under capture
def _answer(value):
    def handler(tx, *args, **kwargs):
        return ConstantVariable(value)

    return handler


for _name, _value in (
    ("is_compiling", True),
    ("is_dynamo_compiling", True),
    ("is_exporting", False),
):
    _f = getattr(torch.compiler, _name, None)
    if _f is not None:
        BUILTIN_HANDLERS[_f] = _answer(_value)
BUILTIN_HANDLERS[collections.OrderedDict] = _dict_ctor(collections.OrderedDict)
BUILTIN_HANDLERS[dict.fromkeys] = _fromkeys(dict)
BUILTIN_HANDLERS[collections.OrderedDict.fromkeys] = _fromkeys(collections.OrderedDict)
