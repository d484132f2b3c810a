"""``explain(fn)(*args)``: what capture made of one call."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .exc import Unsupported
from .wrapper import CapturedModule, capture


@dataclass
class ExplainOutput:
    graph_count: int
    graphs: list = field(default_factory=list)
    ops_per_graph: list = field(default_factory=list)
    break_reasons: list = field(default_factory=list)
    guards: list = field(default_factory=list)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    @property
    def op_count(self) -> int:
        return sum(len(o) for o in self.ops_per_graph)

    def __str__(self) -> str:
        lines = [f"graphs: {self.graph_count}", f"graph breaks: {self.graph_break_count}"]
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(f"graph {i}: {len(ops)} ops")
        for r in self.break_reasons:
            lines.append(f"break: {r}")
        return "\n".join(lines)


def explain(fn):
    """``explain(fn)(*args, **kwargs) -> ExplainOutput`` (graph_count, ops per graph, reasons, guards)."""

    def run(*args, **kwargs):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        wrapped = capture(fn, backend)
        captured = wrapped._captured if isinstance(wrapped, CapturedModule) else wrapped
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped(*args, **kwargs)
        ops = [[n.target for n in g.graph.nodes if n.op in ("call_function", "call_method")] for g in graphs]
        reasons = [captured.unsupported] if isinstance(captured.unsupported, Unsupported) else []
        guards = [g.summary() for e in captured.entries for g in e.guards.guards]
        return ExplainOutput(len(graphs), graphs, ops, reasons, guards)

    return run


_ = torch
