"""Control-flow operators (``cond``, ``while_loop``, ``map_impl``) as extern calls.

Their branches and loop bodies are ATen subgraphs (GraphModule attributes of the graph, which
aot-partition traced with make_fx). The loop IR has no loops or branches of its own to lower
them into, so the operator runs as one extern call on real tensors: the wrapper calls the
operator with the subgraph modules, which run their ATen ops eagerly. The rest of the graph
around the call is still fused and generated as usual.
"""

from __future__ import annotations

import torch

from . import register_lowering

_REASON = (
    "control-flow operator: its subgraphs run eagerly (the loop IR has no branches or "
    "loops to lower them into)"
)


def _operators() -> list:
    found = []
    for name in ("cond", "while_loop", "map_impl"):
        try:
            found.append(getattr(torch.ops.higher_order, name))
        except (AttributeError, RuntimeError):  # an older torch without that operator
            pass
    return found


def _register(op) -> None:
    @register_lowering(op)
    def lower(ctx, *args, **kwargs):
        return ctx.extern(op, args, kwargs, kind="extern", reason=_REASON)


for _op in _operators():
    _register(_op)
