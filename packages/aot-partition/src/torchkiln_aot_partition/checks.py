"""Which unused ATen nodes stay in a graph for the error they raise (dead-code elimination's rule).

Eager PyTorch runs every statement of a program, so an out-of-range index raises even when the
indexed result is never used (``t = x.index_select(0, i)`` with ``t`` dead). Plain FX dead-code
elimination drops such a node and the compiled program returns where eager raised. These ops
check their *data* (indices in range, integer divisors non-zero), which no shape guard can do, so
dead-code elimination keeps them: loop-ir computes an unused node that is still in the graph, and
its kernel's run-time checks raise, after which the pipeline replays the graph eagerly and eager's
own exception reaches the user.
"""

from __future__ import annotations

import torch
from torch import fx

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


def keep_impure_or_checking(node: fx.Node) -> bool:
    """``is_impure_node`` for ``Graph.eliminate_dead_code``: side effects, or a data check."""
    return node.is_impure() or checks_its_data(node)


__all__ = ["checks_its_data", "keep_impure_or_checking"]
