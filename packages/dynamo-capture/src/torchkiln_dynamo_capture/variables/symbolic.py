"""Symbolic sizes (dynamic shapes): an int that is a size of an input, as a graph value.

With dynamic dims, an input's FakeTensor has ``torch.SymInt`` sizes from the capture's ShapeEnv.
Reading one (``x.shape[0]``, ``x.size(1)``, ``x.numel()``) makes a ``SymNodeVariable``: an FX node
computing the size from the tensor at run time, plus the SymInt. Arithmetic on it stays symbolic
(more nodes), and passing it to a torch operation passes the node, so ``x.view(b, -1)`` works for
every batch size. Anything else that needs a Python int (``range(n)``, a dict key, a branch)
*specializes*: ``int(sym)`` records a guard in the ShapeEnv (``s0 == 4``), so the entry is only
reused for that size. Comparisons are decided the same way (the ShapeEnv guards the outcome).

With ``capture_scalar_outputs``, ``t.item()`` and ``t.tolist()`` give *unbacked* values (a
SymInt, SymFloat or SymBool with no value at capture time, ``scalar_output``): arithmetic and
comparisons on them stay in the graph, torch operations take them (``torch.full((n,), v)``, view
sizes after ``torch._check``), and anything that needs the value now (a branch, ``int()``, a
dict key) breaks the graph, since no guard can be written on a value the inputs do not give.
"""

from __future__ import annotations

import operator

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, free_unbacked_symbols

from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker
from .containers import TupleVariable

#: operators that keep a size symbolic (the rest specialize)
ARITHMETIC = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.floordiv,
        operator.mod,
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.ifloordiv,
        operator.imod,
    }
)
COMPARISONS = frozenset(
    {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}
)
#: more operators that stay symbolic when a side is unbacked (nothing to specialize to)
UNBACKED_ARITHMETIC = ARITHMETIC | frozenset(
    {operator.truediv, operator.itruediv, operator.pow, operator.ipow}
)
_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
_PY_TYPE = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


class SymNodeVariable(VariableTracker):
    """A symbolic int: ``node`` computes it in the graph, ``value`` is the SymInt (its hint is the
    size seen at capture time)."""

    def __init__(self, node: torch.fx.Node, value: torch.SymInt):
        self.node = node
        self.value = value

    def python_type(self) -> type:
        return _PY_TYPE.get(type(self.value), int)

    @property
    def unbacked(self) -> bool:
        """A value read from a tensor (``.item()``): no value to specialize to at capture time."""
        return bool(free_unbacked_symbols(self.value))

    # Used as a Python constant, the size specializes: int() guards it in the ShapeEnv.
    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> int:
        try:
            return self.python_type()(self.value)
        except GuardOnDataDependentSymNode as e:
            raise _data_dependent("used as a Python value") from e

    def truth(self, tx) -> bool:
        try:
            return (
                bool(self.value) if isinstance(self.value, torch.SymBool) else bool(self.value != 0)
            )
        except GuardOnDataDependentSymNode as e:
            raise _data_dependent("branched on") from e

    def __repr__(self) -> str:
        return f"SymNodeVariable({self.node.name}, {self.value})"


def _data_dependent(what: str) -> Unsupported:
    return Unsupported(
        f"a value read from a tensor (.item()/.tolist(), or a size only known at run "
        f"time, such as a torch.cond result's) {what}: it has no value "
        "at capture time",
        "the rest runs in Python after a graph break; "
        "torch.where or torch.cond keep a data-dependent choice in the graph",
    )


def sym_value(tx, node_fn, value) -> VariableTracker:
    """A SymNodeVariable for ``value`` when it is symbolic (``node_fn()`` makes its node), else a
    constant."""
    if isinstance(value, _SYM_TYPES) and value.node.expr.free_symbols:
        node = node_fn()
        node.meta["example_value"] = value
        tx.out.bind_unbacked(node, value)
        return SymNodeVariable(node, value)
    if isinstance(value, _SYM_TYPES):
        return ConstantVariable(_PY_TYPE[type(value)](value))
    return ConstantVariable(value)


def scalar_output(tx, tensor_var) -> VariableTracker:
    """``t.item()`` under capture_scalar_outputs: an unbacked symbol of the capture's ShapeEnv
    (``create_unbacked_symint``/``symfloat``, through the fake ``_local_scalar_dense``), computed
    by an ``item`` node at run time."""
    out = tx.out
    if tensor_var.fake.numel() != 1:
        raise Unsupported("Tensor.item() of a tensor with more than one element (eager raises)")
    with out.fake_mode:
        value = tensor_var.fake.item()
    return sym_value(tx, lambda: out.graph.call_method("item", (tensor_var.node,)), value)


#: torch's checks that teach the ShapeEnv a fact about a value (``torch._check(n >= 0)``)
CHECKS = frozenset(
    f for f in (getattr(torch, "_check", None), getattr(torch, "_check_is_size", None)) if f
)


def call_check(tx, fn, args, kwargs) -> VariableTracker:
    """``torch._check(cond)`` / ``torch._check_is_size(n)`` on a symbolic value: run now on the
    symbolic value (the ShapeEnv records the fact, so later ops may rely on it) and kept as a
    graph node, so the compiled code checks it at run time as eager does."""
    if not args or not isinstance(args[0], SymNodeVariable):
        real = [a.as_python_constant() for a in args]
        fn(*real, **{k: v.as_python_constant() for k, v in kwargs.items()})
        return ConstantVariable(None)
    value, node = args[0].value, args[0].node
    graph = tx.out.graph
    if fn is not torch._check:  # _check_is_size(n) is deprecated for _check(n >= 0): the same fact
        value = value >= 0
        node = graph.call_function(operator.ge, (node, 0))
        node.meta["example_value"] = value
    try:
        torch._check(value)
    except GuardOnDataDependentSymNode as e:
        raise _data_dependent(f"checked with {fn.__name__}") from e
    # aten._assert_scalar, not torch._check: an ATen op make_fx keeps, so the check survives
    # into the compiled graph (torch._check would run once while tracing and vanish)
    check = graph.call_function(
        torch.ops.aten._assert_scalar.default,
        (node, f"Runtime assertion failed for expression {value.node.expr}"),
    )
    check.meta["example_value"] = None
    return ConstantVariable(None)


def sym_binary(tx, fn, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    """``fn(a, b)`` where one side is symbolic and the other an int or symbolic."""
    va = a.value if isinstance(a, SymNodeVariable) else a.as_python_constant()
    vb = b.value if isinstance(b, SymNodeVariable) else b.as_python_constant()
    if any(isinstance(v, SymNodeVariable) and v.unbacked for v in (a, b)):
        return _unbacked_binary(tx, fn, a, b, va, vb)
    if fn in COMPARISONS:
        return ConstantVariable(bool(fn(va, vb)))  # decided now; the ShapeEnv guards the outcome
    if fn not in ARITHMETIC or not all(isinstance(v, (int, torch.SymInt)) for v in (va, vb)):
        return tx.wrap(fn(int(va), int(vb)), None)  # a float, a bit operation: specialize
    result = fn(va, vb)
    na = a.node if isinstance(a, SymNodeVariable) else va
    nb = b.node if isinstance(b, SymNodeVariable) else vb
    base = _BINARY.get(fn, fn)
    return sym_value(tx, lambda: tx.out.graph.call_function(base, (na, nb)), result)


def sym_min_max(tx, fn, items: list) -> VariableTracker | None:
    """``min``/``max`` over ints where some are symbolic sizes, as ``torch.sym_min``/``sym_max``
    nodes (TorchDynamo's reading): ``min(seq_len, max_positions)`` stays symbolic instead of
    guarding the length to its value. None when an item is not an int or size."""
    if not items or not any(isinstance(i, SymNodeVariable) for i in items):
        return None
    if not all(
        isinstance(i, SymNodeVariable)
        and isinstance(i.value, torch.SymInt)
        or isinstance(i, ConstantVariable)
        and type(i.value) is int
        for i in items
    ):
        return None
    sym_fn = torch.sym_min if fn is min else torch.sym_max
    acc = items[0]
    for item in items[1:]:
        va = acc.value
        vb = item.value
        na = acc.node if isinstance(acc, SymNodeVariable) else va
        nb = item.node if isinstance(item, SymNodeVariable) else vb
        acc = sym_value(
            tx, lambda na=na, nb=nb: tx.out.graph.call_function(sym_fn, (na, nb)), sym_fn(va, vb)
        )
    return acc


def sym_unary(tx, fn, a: SymNodeVariable) -> VariableTracker:
    """``-n`` / ``+n`` / ``~n`` of an unbacked value: a new symbolic value and its node."""
    try:
        result = fn(a.value)
    except (GuardOnDataDependentSymNode, TypeError) as e:
        raise _data_dependent(f"used with {getattr(fn, '__name__', fn)}") from e
    return sym_value(tx, lambda: tx.out.graph.call_function(fn, (a.node,)), result)


def _unbacked_binary(tx, fn, a, b, va, vb):
    """Arithmetic and comparisons with an unbacked side: a new symbolic value and its node."""
    if fn not in UNBACKED_ARITHMETIC and fn not in COMPARISONS:
        raise _data_dependent(f"used with {getattr(fn, '__name__', fn)}")
    if not all(isinstance(v, (int, float, bool, *_SYM_TYPES)) for v in (va, vb)):
        raise _data_dependent(
            f"combined with a {type(va if not isinstance(va, _SYM_TYPES) else vb).__name__}"
        )
    try:
        result = fn(va, vb)
    except GuardOnDataDependentSymNode as e:
        raise _data_dependent(f"used with {getattr(fn, '__name__', fn)}") from e
    na = a.node if isinstance(a, SymNodeVariable) else va
    nb = b.node if isinstance(b, SymNodeVariable) else vb
    base = _BINARY.get(fn, fn)
    return sym_value(tx, lambda: tx.out.graph.call_function(base, (na, nb)), result)


_BINARY = {
    operator.itruediv: operator.truediv,
    operator.ipow: operator.pow,
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
}


def is_symbolic(v: VariableTracker) -> bool:
    return isinstance(v, SymNodeVariable)


def sizes_variable(tx, tensor_var, values, kind: str) -> VariableTracker:
    """``x.shape`` / ``x.size()`` / ``x.stride()`` of a tensor with symbolic sizes: a torch.Size
    (or tuple) of SymNodeVariables and constants. Strides specialize (rarely read)."""
    if kind == "stride":
        return tx.wrap(tuple(int(s) for s in values), None)
    items = [
        sym_value(
            tx,
            lambda i=i: tx.out.graph.call_function(
                torch.ops.aten.sym_size.int, (tensor_var.node, i)
            ),
            s,
        )
        for i, s in enumerate(values)
    ]
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
