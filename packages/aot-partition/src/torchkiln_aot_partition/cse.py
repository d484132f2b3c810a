"""Common subexpressions of a functional ATen graph, computed once.

Autocast casts a layer's input once per linear layer that reads it: BERT's query, key and value
projections each cast the same layer-norm output to bfloat16, so the forward wrote three copies
of it (and the backward's three weight gradients read one each). In a functional graph two nodes
with the same op and the same arguments have the same value; ``eliminate_common_subexpressions``
keeps the first and points the other's users at it. Never merged: random ops (two draws are two
values), ops with side effects or data checks (each raises where eager would), ``empty``-like
allocations (unspecified values), and two nodes whose memory the graph both returns, as
themselves or through views (eager's two storages would be one, and a write to one output
would change the other).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from .checks import keep_impure_or_checking

aten = torch.ops.aten

_UNSPECIFIED = frozenset(
    {
        aten.empty.memory_format,
        aten.empty_like.default,
        aten.empty_strided.default,
        aten.new_empty.default,
        aten.new_empty_strided.default,
    }
)


def _key_of(value: Any) -> Any:
    """``value`` (an argument) as a hashable key; lists become tuples (raises TypeError when a
    leaf cannot be hashed)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key_of(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key_of(v)) for k, v in value.items())))
    if isinstance(value, float):
        return ("float", value.hex())  # -0.0 == 0.0, but clamp(max=-0.0) is not clamp(max=0.0)
    hash(value)
    return (type(value).__name__, value)


def _mergeable(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload) or target in _UNSPECIFIED:
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return not keep_impure_or_checking(node)


def eliminate_common_subexpressions(gm: fx.GraphModule) -> int:
    """Merge nodes of ``gm`` computing the same op on the same arguments; returns how many went.
    The caller recompiles ``gm``."""
    seen: dict[Any, fx.Node] = {}
    merged = 0
    outputs = _output_roots(gm)
    for node in list(gm.graph.nodes):
        if not _mergeable(node):
            continue
        try:
            key = (node.target, _key_of(node.args), _key_of(node.kwargs))
        except TypeError:
            continue
        first = seen.setdefault(key, node)
        if first is node:
            continue
        if node in outputs and first in outputs:
            # what two outputs are (or view) that eager returns on two storages (``return x @
            # y, x @ y``): merged, the caller would get one memory twice, and a write to one
            # output would change the other
            continue
        if node in outputs:
            outputs.add(first)
        node.replace_all_uses_with(first)
        gm.graph.erase_node(node)
        merged += 1
    return merged


def _output_roots(gm: fx.GraphModule) -> set[fx.Node]:
    """The nodes whose memory the graph returns: each output, walked back through views."""
    found: set[fx.Node] = set()

    def root(node: fx.Node) -> fx.Node:
        while (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target.is_view
            and node.args
            and isinstance(node.args[0], fx.Node)
        ):
            node = node.args[0]
        found.add(node)
        return node

    for node in gm.graph.nodes:
        if node.op == "output":
            fx.node.map_arg(node.args, root)
    return found


__all__ = ["eliminate_common_subexpressions"]
