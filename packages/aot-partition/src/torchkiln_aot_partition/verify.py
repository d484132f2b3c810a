"""`check_functional`: the spec a graph handed to a compiler must meet (contract C2)."""

from __future__ import annotations

import operator

import torch
from torch import fx

from .errors import NotFunctionalError


def check_functional(gm: fx.GraphModule) -> None:
    """Raise NotFunctionalError listing every way gm breaks contract C2; return None if it meets it.

    C2: every placeholder and call_function node has meta["val"]; call_function targets are
    torch._ops.OpOverload or operator.getitem; no op mutates its inputs; no call_module /
    call_method nodes; the output is a flat tuple of nodes.
    """
    problems: list[str] = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function") and "val" not in node.meta:
            problems.append(f"{node.name}: no meta['val']")
        if node.op in ("call_module", "call_method"):
            problems.append(f"{node.name}: {node.op} {node.target} (only call_function is allowed)")
        if node.op == "call_function":
            target = node.target
            if target is operator.getitem:
                continue
            if not isinstance(target, torch._ops.OpOverload):
                problems.append(f"{node.name}: target {target!r} is not an ATen/prims OpOverload")
            elif target._schema.is_mutable:
                problems.append(f"{node.name}: {target} mutates its inputs")
        if node.op == "output":
            out = node.args[0]
            if not isinstance(out, tuple) or not all(isinstance(o, fx.Node) for o in out):
                problems.append(f"output is not a flat tuple of nodes: {out!r}")
    if problems:
        raise NotFunctionalError("graph breaks contract C2:\n  " + "\n  ".join(problems))
