"""Symbolic sizes (dynamic shapes): an int that is a size of an input, as a graph value.

With dynamic dims, an input's FakeTensor has ``torch.SymInt`` sizes from the capture's ShapeEnv.
Reading one (``x.shape[0]``, ``x.size(1)``, ``x.numel()``) makes a ``SymNodeVariable``: an FX node
computing the size from the tensor at run time, plus the SymInt. Arithmetic on it stays symbolic
(more nodes), and passing it to a torch operation passes the node, so ``x.view(b, -1)`` works for
every batch size. Anything else that needs a Python int (``range(n)``, a dict key, a branch)
*specializes*: ``int(sym)`` records a guard in the ShapeEnv (``s0 == 4``), so the entry is only
reused for that size. Comparisons are decided the same way (the ShapeEnv guards the outcome).
"""

from __future__ import annotations

import operator

import torch

from .base import ConstantVariable, VariableTracker

#: operators that keep a size symbolic (the rest specialize)
ARITHMETIC = frozenset({operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
                        operator.iadd, operator.isub, operator.imul, operator.ifloordiv, operator.imod})
COMPARISONS = frozenset({operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge})


class SymNodeVariable(VariableTracker):
    """A symbolic int: ``node`` computes it in the graph, ``value`` is the SymInt (its hint is the
    size seen at capture time)."""

    def __init__(self, node: torch.fx.Node, value: torch.SymInt):
        self.node = node
        self.value = value

    def python_type(self) -> type:
        return int

    # Used as a Python constant, the size specializes: int() guards it in the ShapeEnv.
    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> int:
        return int(self.value)

    def truth(self, tx) -> bool:
        return bool(self.value != 0)

    def __repr__(self) -> str:
        return f"SymNodeVariable({self.node.name}, {self.value})"


def sym_value(tx, node_fn, value) -> VariableTracker:
    """A SymNodeVariable for ``value`` when it is symbolic (``node_fn()`` makes its node), else a
    constant."""
    if isinstance(value, torch.SymInt) and value.node.expr.free_symbols:
        node = node_fn()
        node.meta["example_value"] = value
        return SymNodeVariable(node, value)
    return ConstantVariable(int(value) if isinstance(value, torch.SymInt) else value)


def sym_binary(tx, fn, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    """``fn(a, b)`` where one side is symbolic and the other an int or symbolic."""
    va = a.value if isinstance(a, SymNodeVariable) else a.as_python_constant()
    vb = b.value if isinstance(b, SymNodeVariable) else b.as_python_constant()
    if fn in COMPARISONS:
        return ConstantVariable(bool(fn(va, vb)))  # decided now; the ShapeEnv guards the outcome
    if fn not in ARITHMETIC or not all(isinstance(v, (int, torch.SymInt)) for v in (va, vb)):
        return tx.wrap(fn(int(va), int(vb)), None)  # a float, a bit operation: specialize
    result = fn(va, vb)
    na = a.node if isinstance(a, SymNodeVariable) else va
    nb = b.node if isinstance(b, SymNodeVariable) else vb
    base = _BINARY.get(fn, fn)
    return sym_value(tx, lambda: tx.out.graph.call_function(base, (na, nb)), result)


_BINARY = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
           operator.ifloordiv: operator.floordiv, operator.imod: operator.mod}


def is_symbolic(v: VariableTracker) -> bool:
    return isinstance(v, SymNodeVariable)


def sizes_variable(tx, tensor_var, values, kind: str) -> VariableTracker:
    """``x.shape`` / ``x.size()`` / ``x.stride()`` of a tensor with symbolic sizes: a torch.Size
    (or tuple) of SymNodeVariables and constants. Strides specialize (rarely read)."""
    from .containers import TupleVariable

    if kind == "stride":
        return tx.wrap(tuple(int(s) for s in values), None)
    items = [sym_value(tx, lambda i=i: tx.out.graph.call_function(torch.ops.aten.sym_size.int,
                                                                   (tensor_var.node, i)), s)
             for i, s in enumerate(values)]
    return TupleVariable(items, cls=torch.Size)



class SliceVariable(VariableTracker):
    """``slice(a, b, c)`` with a symbolic bound: indexing a tensor with it stays symbolic; used
    any other way it specializes like its bounds."""

    def __init__(self, parts: list[VariableTracker]):
        self.parts = parts

    def python_type(self) -> type:
        return slice

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> slice:
        return slice(*(p.as_python_constant() for p in self.parts))

    def __repr__(self) -> str:
        return f"SliceVariable({self.parts})"
