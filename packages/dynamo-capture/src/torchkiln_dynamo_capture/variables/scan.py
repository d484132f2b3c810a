"""``torch._higher_order_ops.associative_scan(combine_fn, xs, dim)`` with an elementwise
``combine_fn``, as ordinary graph ops.

Eager runs its combine function under ``torch.vmap`` on the CPU (``combine_mode="generic"``) and
as a fused operator on CUDA (``"pointwise"``, which requires an elementwise function); neither can
be captured as it is. When ``combine_fn`` is elementwise (every op of it, traced once on its own,
is in ``_ELEMENTWISE``), applying it to whole slices of the scanned tensors computes what the
vmapped function computes slice by slice, so the scan is inlined as ``inclusive_scan`` below: a
Hillis-Steele scan, ``ceil(log2(n))`` steps, each combining every value with the one ``offset``
before it (``combine_fn(earlier, later)``, the order an associative but not commutative function
needs). Sums of products come out in another association than eager's, so results differ by
rounding. transformers' Mamba takes this path when it sees it is compiled; it was 12 graphs.

A ``combine_fn`` with any other op (a matmul, a reduction, a Python branch on values) is not
modelled: the call breaks the graph and runs in Python, as before.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from ..exc import Unsupported
from . import higher_order
from .base import ConstantVariable, VariableTracker
from .containers import ListVariable, TupleVariable
from .functions import UserFunctionVariable
from .tensors import TensorVariable

try:
    from torch._higher_order_ops.associative_scan import associative_scan as ASSOCIATIVE_SCAN
except ImportError:  # an older torch
    ASSOCIATIVE_SCAN = None

#: graph targets a combine function may use: elementwise (or broadcasting) ops only
_ELEMENTWISE = {
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.neg,
    operator.pow,
    torch.add,
    torch.sub,
    torch.mul,
    torch.div,
    torch.neg,
    torch.exp,
    torch.log,
    torch.sigmoid,
    torch.tanh,
    torch.maximum,
    torch.minimum,
    torch.where,
    torch.abs,
    torch.clamp,
}
_ELEMENTWISE_METHODS = {
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "exp",
    "log",
    "sigmoid",
    "tanh",
    "abs",
    "clamp",
    "maximum",
    "minimum",
    "__add__",
    "__sub__",
    "__mul__",
    "__truediv__",
    "__neg__",
}


def inclusive_scan(combine_fn: Any, xs: Any, dim: int, reverse: bool) -> Any:
    """The inclusive scan of ``xs`` (a tensor, or a tuple or list of same-length tensors) along
    ``dim`` with an elementwise, associative ``combine_fn``. Inlined by capture."""
    single = isinstance(xs, torch.Tensor)
    leaves = [xs] if single else list(xs)
    if reverse:
        leaves = [x.flip(dim) for x in leaves]
    n = leaves[0].shape[dim]
    offset = 1
    while offset < n:
        earlier = [x.narrow(dim, 0, n - offset) for x in leaves]
        later = [x.narrow(dim, offset, n - offset) for x in leaves]
        if single:
            combined = [combine_fn(earlier[0], later[0])]
        else:
            combined = list(combine_fn(type(xs)(earlier), type(xs)(later)))
        leaves = [torch.cat([x.narrow(dim, 0, offset), c], dim) for x, c in zip(leaves, combined)]
        offset *= 2
    if reverse:
        leaves = [x.flip(dim) for x in leaves]
    return leaves[0] if single else type(xs)(leaves)


def _check_elementwise(graph: Any) -> None:
    for node in graph.nodes:
        if node.op == "call_function" and node.target not in _ELEMENTWISE:
            raise Unsupported(f"associative_scan with a combine function calling {node.target}")
        if node.op == "call_method" and node.target not in _ELEMENTWISE_METHODS:
            raise Unsupported(f"associative_scan with a combine function calling .{node.target}")
        if node.op in ("call_module", "get_attr"):
            raise Unsupported("associative_scan with a combine function reading a module")


def call_associative_scan(tx, args: list, kwargs: dict) -> VariableTracker:
    """``associative_scan(combine_fn, xs, dim, reverse=False, combine_mode=...)`` inlined as
    ``inclusive_scan`` when ``combine_fn`` is elementwise; Unsupported otherwise."""
    names = ("combine_fn", "xs", "dim", "reverse", "combine_mode")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise Unsupported(f"associative_scan: argument {k!r}")
        bound[k] = v
    if not {"combine_fn", "xs", "dim"} <= bound.keys():
        raise Unsupported("associative_scan: missing arguments")
    xs = bound["xs"]
    if isinstance(xs, TensorVariable):
        leaves = [xs]
    elif isinstance(xs, (TupleVariable, ListVariable)) and all(
        isinstance(x, TensorVariable) for x in xs.items
    ):
        leaves = list(xs.items)
    else:
        raise Unsupported("associative_scan over something other than tensors")
    if not bound["dim"].is_python_constant():
        raise Unsupported("associative_scan: a dim not known at capture time")
    reverse = bound.get("reverse", ConstantVariable(False))
    if not reverse.is_python_constant():
        raise Unsupported("associative_scan: reverse not known at capture time")
    n = len(leaves)

    def as_args(params, _):
        if isinstance(xs, TensorVariable):
            return [params[0], params[1]]
        cls = TupleVariable if isinstance(xs, TupleVariable) else ListVariable
        return [cls(list(params[:n])), cls(list(params[n:]))]

    # traced once on whole leaves (then dropped), only to see which ops it uses
    sub = higher_order._trace(
        tx, bound["combine_fn"], leaves + leaves, "associative_scan_combine", call_as=as_args
    )
    _check_elementwise(sub.graph)
    scan = UserFunctionVariable.from_function(tx, inclusive_scan)
    return scan.call(tx, [bound["combine_fn"], xs, bound["dim"], reverse], {})
