"""Which unused ATen nodes stay in a graph for the error they raise (dead-code elimination's rule).

Eager PyTorch runs every statement of a program, so an out-of-range index raises even when the
indexed result is never used (``t = x.index_select(0, i)`` with ``t`` dead). Plain FX dead-code
elimination drops such a node and the compiled program returns where eager raised. These ops
check their *data* (indices in range, integer divisors non-zero), which no shape guard can do, so
dead-code elimination keeps them: loop-ir computes an unused node that is still in the graph, and
its kernel's run-time checks raise, after which the pipeline replays the graph eagerly and eager's
own exception reaches the user. Likewise a pointwise op whose eager kernel refuses its operands'
dtypes (``bitwise_not`` of a float): eager raises before reading any element.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import fx
from torch.utils._python_dispatch import _disable_current_modes

aten = torch.ops.aten

# ops that raise on out-of-range index values (IndexError or RuntimeError, as eager does)
_INDEX_CHECKED = {
    aten.index_select.default,
    aten.gather.default,
    aten.index.Tensor,
    aten.embedding.default,
    aten.take.default,
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter_add.default,
    aten.scatter_reduce.two,
    aten.index_put.default,
    aten.index_add.default,
    aten.index_copy.default,
    aten.index_fill.int_Scalar,
    aten.index_fill.int_Tensor,
}

# ops that raise ZeroDivisionError on an integer divisor of 0 (floats give inf/nan instead)
_INTEGER_DIVISION = {
    aten.div.Tensor_mode,
    aten.div.Scalar_mode,
    aten.floor_divide.default,
    aten.remainder.Tensor,
    aten.remainder.Scalar,
    aten.fmod.Tensor,
    aten.fmod.Scalar,
}


def checks_its_data(node: fx.Node) -> bool:
    """True when ``node`` can raise on the values (not only the shapes) of its inputs."""
    if node.op != "call_function":
        return False
    if node.target in _INDEX_CHECKED:
        return True
    if node.target in _INTEGER_DIVISION:
        val = node.meta.get("val")
        return (
            isinstance(val, torch.Tensor) and not val.is_floating_point() and not val.is_complex()
        )
    return False


def refuses_its_dtypes(node: fx.Node) -> bool:
    """True when ``node`` is an unused pointwise op whose eager kernel refuses its operands'
    dtypes before reading any element: ``bitwise_not`` of a float raises NotImplementedError
    even on an empty tensor (fuzz seed 789177), which a compiled graph that dropped the node
    would not. Tried once per op, device and operand dtypes (and scalars), on empty tensors of
    the operands' device. A node something reads is left to the code generator (loop-ir runs
    an op whose dtypes eager refuses as its ATen kernel, which raises)."""
    if node.users or node.op != "call_function" or node.kwargs:
        return False
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    if torch.Tag.pointwise not in node.target.tags:
        return False
    key: list[Any] = []
    device = None
    for arg in node.args:
        val = arg.meta.get("val") if isinstance(arg, fx.Node) else arg
        if isinstance(val, torch.Tensor):
            key.append(val.dtype)
            device = device or val.device
        elif isinstance(val, (bool, int, float)):
            key.append((type(val), val))  # 1, 1.0 and True hash alike
        else:
            return False  # a symbolic scalar or a list: nothing to try it with
    return device is not None and _refused(node.target, str(device), tuple(key))


@functools.cache
def _refused(op: torch._ops.OpOverload, device: str, key: tuple) -> bool:
    # real tensors, whatever tracing mode is active (a fake tensor's meta kernel checks no dtype)
    with _disable_current_modes():
        args = [
            torch.empty(0, dtype=k, device=device) if isinstance(k, torch.dtype) else k[1]
            for k in key
        ]
        try:
            op(*args)
        except (NotImplementedError, RuntimeError, TypeError):
            return True
    return False


def checks_its_inputs(node: fx.Node) -> bool:
    """True when ``node`` raises in eager for its inputs though nobody reads its result: a data
    check (``checks_its_data``) or dtypes its kernel refuses (``refuses_its_dtypes``)."""
    return checks_its_data(node) or refuses_its_dtypes(node)


def keep_impure_or_checking(node: fx.Node) -> bool:
    """``is_impure_node`` for ``Graph.eliminate_dead_code``: side effects, or a check of the
    inputs (``checks_its_inputs``)."""
    return node.is_impure() or checks_its_inputs(node)


__all__ = ["checks_its_data", "checks_its_inputs", "keep_impure_or_checking", "refuses_its_dtypes"]
