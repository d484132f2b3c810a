"""Python's operators on tracked values: binary and comparison operators (``binary_op``),
``is`` (``identity``) and ``in`` (``contains``), across every family.

The opcode tables map the translator's BINARY_OP/COMPARE_OP arguments to the ``operator``
functions; ``binary_op`` then picks the family's rule: symbolic sizes stay symbolic, tensors go
into the graph, constants fold, sequences and dicts combine, user classes' dunders are inlined.
"""

from __future__ import annotations

import operator

from torchkiln_guards import IdMatch

from ..exc import Unsupported
from .base import NO_REAL, ConstantVariable, VariableTracker, is_numpy_scalar
from .containers import DictVariable, ListVariable, TupleVariable
from .functions import UserFunctionVariable
from .modules import NNModuleVariable
from .numpy_arrays import NumpyNdarrayVariable
from .numpy_calls import numpy_operator
from .objects import DataclassVariable, NewObjectVariable, UserObjectVariable
from .symbolic import is_symbolic, sym_binary
from .tensors import TensorVariable

#: BINARY_OP's argument (as ``dis`` spells it) -> the operator function
BINARY_OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "@": operator.matmul,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "@=": operator.imatmul,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
}
#: COMPARE_OP's argument -> the comparison function
COMPARE_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}
#: each in-place operator -> its binary form (``number += tensor`` rebinds, ``tuple += tuple`` too)
INPLACE_TO_BINARY = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
    operator.ipow: operator.pow,
    operator.imatmul: operator.matmul,
    operator.iand: operator.and_,
    operator.ior: operator.or_,
    operator.ixor: operator.xor,
    operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}
#: the ``operator`` functions whose call is ``binary_op`` (``operator.add(a, b)``, ``reduce(operator.mul, ...)``)
OPERATOR_FNS = set(BINARY_OPS.values()) | set(COMPARE_OPS.values())


def binary_op(tx, fn, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    if (
        (is_symbolic(a) or is_symbolic(b))
        and not isinstance(a, TensorVariable)
        and not isinstance(b, TensorVariable)
        and a.is_python_constant()
        and b.is_python_constant()
    ):
        return sym_binary(tx, fn, a, b)
    if isinstance(a, NumpyNdarrayVariable) or isinstance(b, NumpyNdarrayVariable):
        return numpy_operator(tx, fn, [a, b])
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        if not isinstance(a, TensorVariable):  # `number += tensor` rebinds: not in-place
            fn = INPLACE_TO_BINARY.get(fn, fn)
        return tx.out.call_tensor_op(tx, "call_function", fn, [a, b], {})
    if (
        a.is_python_constant()
        and b.is_python_constant()
        and not isinstance(a, (ListVariable, DictVariable))
        and not (_holds_symbolic(a) or _holds_symbolic(b))
    ):
        try:
            result = fn(a.as_python_constant(), b.as_python_constant())
        except Exception as e:
            raise Unsupported(f"{fn.__name__} on constants raised {type(e).__name__}: {e}") from e
        if is_numpy_scalar(result) and a.source is None and b.source is None:
            # np.float64(2.5) * 2: made from literals, a known immutable value (numpy_arrays.py
            # makes numpy scalars of constant numpy calls alike), whose methods run now
            return ConstantVariable(result)
        return tx.wrap(result, None)
    base = INPLACE_TO_BINARY.get(fn, fn)
    if isinstance(a, ListVariable) and fn is operator.iadd:
        a.call_method(tx, "extend", [b], {})
        return a
    if (
        isinstance(a, (ListVariable, TupleVariable))
        and base is operator.add
        and isinstance(b, (ListVariable, TupleVariable))
    ):
        return type(a)._new_like(a, a.items + b.items)
    if base is operator.add and (
        isinstance(a, ConstantVariable)
        and isinstance(a.value, tuple)
        and isinstance(b, TupleVariable)
        or isinstance(a, TupleVariable)
        and isinstance(b, ConstantVariable)
        and type(b.value) is tuple
    ):
        # a constant tuple (a torch.Size of static dims, ``()`` that ``all_hidden_states += (h,)``
        # starts from) + a tuple of tracked values (tensors, symbolic sizes), either way round
        return TupleVariable(
            [ConstantVariable(v) for v in a.value] + list(b.items)
            if isinstance(a, ConstantVariable)
            else list(a.items) + [ConstantVariable(v) for v in b.value]
        )
    if (
        isinstance(a, (ListVariable, TupleVariable))
        and base is operator.mul
        and b.is_python_constant()
    ):
        return type(a)._new_like(a, a.items * b.as_python_constant())
    if (
        fn in (operator.eq, operator.ne)
        and isinstance(a, DataclassVariable)
        and isinstance(b, DataclassVariable)
    ):
        equal = a.equals(b)
        if equal is not None:
            return ConstantVariable(equal if fn is operator.eq else not equal)
    if (
        fn in (operator.eq, operator.ne)
        and isinstance(a, (ListVariable, TupleVariable))
        and type(a) is type(b)
    ):
        equal = _sequences_equal(tx, a, b)
        if equal is not None:
            return ConstantVariable(equal if fn is operator.eq else not equal)
    if fn in (operator.eq, operator.ne):
        ra, rb = a.real_value(), b.real_value()
        if ra is not NO_REAL and rb is not NO_REAL:
            return ConstantVariable(fn(ra, rb))
        if (ra is None or rb is None) or type(a) is not type(b):
            return ConstantVariable(fn is operator.ne)
    if isinstance(a, DictVariable) and base is operator.or_ and isinstance(b, DictVariable):
        return DictVariable({**a.items, **b.items}, cls=a.cls)
    r = _user_dunder(tx, fn, a, b)
    if r is not None:
        return r
    raise Unsupported(f"operator {fn.__name__} on {type(a).__name__} and {type(b).__name__}")


def _sequences_equal(tx, a: VariableTracker, b: VariableTracker) -> bool | None:
    """``a == b`` for two lists (or two tuples) item by item, as Python compares them
    (Longformer's ``list(scores.size()) == [batch, seq, heads, window]``); None when an item's
    comparison is not a known constant."""
    if len(a.items) != len(b.items):
        return False
    for x, y in zip(a.items, b.items):
        same = binary_op(tx, operator.eq, x, y)
        if not same.is_python_constant():
            return None
        if not same.as_python_constant():
            return False
    return True


def _holds_symbolic(v: VariableTracker) -> bool:
    """A tuple or list holding a symbolic size: folding it to a constant would specialize the
    size (``x.size()[:-1] + (n,)`` in GPT-2 made every sequence length recompile)."""
    return isinstance(v, (TupleVariable, ListVariable)) and any(
        is_symbolic(i) or _holds_symbolic(i) for i in v.items
    )


def _user_dunder(tx, fn, a, b):
    name = getattr(fn, "__name__", "").strip("_")
    for obj, other, dunder in ((a, b, f"__{name}__"), (b, a, f"__r{name}__")):
        if isinstance(obj, (NewObjectVariable, UserObjectVariable)) and any(
            dunder in k.__dict__ for k in obj.python_type().__mro__[:-1]
        ):
            return obj.var_getattr(tx, dunder).call(tx, [other], {})
    return None


def identity(a: VariableTracker, b: VariableTracker, tx=None) -> bool:
    if a is b:
        return True
    ra, rb = _identity_value(a, tx), _identity_value(b, tx)
    if ra is not NO_REAL and rb is not NO_REAL:
        return ra is rb
    return False


def _identity_value(v: VariableTracker, tx) -> object:
    """The real object behind ``v`` for an ``is`` test. A nested function read from a source is
    guarded by its code, not its identity (it is a new object each time its frame runs), so it
    has no real value; compared by identity, it is guarded by identity here and its object used.
    Without that, ``f is not type(self).forward`` with ``f`` such a function read ``True`` where
    eager read ``False`` (the ``kernels`` package's dispatch from ``Func.forward``)."""
    real = v.real_value()
    if real is not NO_REAL or tx is None:
        return real
    if (
        isinstance(v, UserFunctionVariable)
        and v.by_code
        and v.fn is not None
        and v.self_var is None
        and v.source is not None
    ):
        tx.out.guards.append(IdMatch(v.source, v.fn))
        return v.fn
    return real


def contains(tx, item: VariableTracker, container: VariableTracker) -> bool:
    if (
        isinstance(container, (DictVariable,))
        or hasattr(container, "call_method")
        and isinstance(container, DataclassVariable)
    ):
        return container.call_method(tx, "__contains__", [item], {}).as_python_constant()
    if isinstance(container, (ListVariable, TupleVariable)):
        if isinstance(item, TensorVariable):
            return any(identity(item, x) for x in container.items)
        v = item.as_python_constant()
        return any(x.is_python_constant() and x.as_python_constant() == v for x in container.items)
    if container.is_python_constant() and item.is_python_constant():
        return item.as_python_constant() in container.as_python_constant()
    if isinstance(container, NNModuleVariable):
        return container.call_method(tx, "__contains__", [item], {}).as_python_constant()
    return tx.truth(container.call_method(tx, "__contains__", [item], {}))
