"""Values read from tensors at run time (``.item()``, ``.tolist()``) and the checks on them.

``aten._local_scalar_dense`` of an integer tensor is an extern call whose result binds an
unbacked size symbol (``u0 = extern(buf)``) in the wrapper: later buffers, views and kernels use
``u0`` like any input size. Float and bool scalars would have to be kernel arguments of their
own type (kernels take integer sizes only): refused, the graph runs eagerly.

``aten._assert_scalar`` (``torch._check(n > 0)``, kept by capture) checks its condition at run
time in the wrapper, as eager does, instead of being dropped.
"""

from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.fx

from ..errors import Unlowerable
from . import aten, register_lowering


@register_lowering(aten._local_scalar_dense.default)
def local_scalar_dense(ctx, x):
    # float and bool results are refused before lowering (GraphLowering.run)
    return ctx.extern(
        aten._local_scalar_dense.default,
        (x,),
        {},
        kind="extern",
        reason="value read from a tensor (.item()): binds a size symbol",
    )


def assert_condition(source: str, message: str, **values: Any) -> None:
    """Raise eager's error when ``source`` (a Python expression over the symbols) is false."""
    if not eval(source, {"__builtins__": {}}, values):  # noqa: S307 - our own printed sympy expression
        raise RuntimeError(message or f"run-time check failed: {source}")


_OPERATORS = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.truediv: "/",
    operator.pow: "**",
    operator.eq: "==",
    operator.ne: "!=",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
    operator.and_: "and",
    operator.or_: "or",
}


def _source(node: Any, names: dict) -> str:
    """The check's condition as Python over the symbols, rebuilt from the FX nodes that compute
    it, not from its value's expression: the ShapeEnv simplifies that expression with the very
    fact being checked (``u0 > 0`` reads as True once torch._check(u0 > 0) was traced)."""
    if not isinstance(node, torch.fx.Node):
        if isinstance(node, (bool, int, float)):
            return repr(node)
        raise Unlowerable(f"a run-time check over a {type(node).__name__}")
    op = _OPERATORS.get(node.target)
    if op is not None and len(node.args) == 2:
        return f"({_source(node.args[0], names)} {op} {_source(node.args[1], names)})"
    if node.target is operator.not_:
        return f"(not {_source(node.args[0], names)})"
    val = node.meta.get("val")
    expr = sympy.sympify(val.node.expr) if isinstance(val, (torch.SymInt, torch.SymBool)) else None
    if isinstance(expr, sympy.Symbol):  # a value read at run time (u0) or an input size (s0)
        names[expr.name] = sympy.Symbol(expr.name, integer=True)
        return expr.name
    raise Unlowerable(f"a run-time check over {node.format_node()}")


@register_lowering(aten._assert_scalar.default)
def assert_scalar(ctx, cond, message=""):
    names: dict = {}
    source = _source(ctx.node.args[0], names)
    return ctx.extern(
        assert_condition,
        (source, message),
        dict(sorted(names.items())),
        kind="extern",
        reason="run-time check (torch._check)",
    )
