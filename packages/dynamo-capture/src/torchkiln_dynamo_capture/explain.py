"""``explain(fn)(*args)``: what capture made of one call: its graphs, its breaks and why, its guards."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .breaks import GraphBreak
from .exc import Unsupported
from .module_proxy import CapturedModule
from .wrapper import capture


@dataclass
class ExplainOutput:
    """The report. ``breaks`` are the splits in the order they happened; ``ops_per_graph`` lists each
    graph's operations by name; ``guards`` has one list of guard descriptions per graph.
    ``unsupported`` is set when capture gave up on a frame entirely (it then ran eagerly)."""

    graph_count: int
    graphs: list = field(default_factory=list)
    ops_per_graph: list = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    guards: list = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)

    @property
    def graph_break_count(self) -> int:
        return len(self.breaks)

    @property
    def break_reasons(self) -> list[GraphBreak]:
        return self.breaks

    @property
    def op_count(self) -> int:
        return sum(len(o) for o in self.ops_per_graph)

    def to_dict(self) -> dict:
        """JSON-serialisable: counts, breaks, ops and guards as plain strings and numbers."""
        return {
            "graph_count": self.graph_count,
            "graph_break_count": self.graph_break_count,
            "breaks": [b.to_dict() for b in self.breaks],
            "ops_per_graph": [list(ops) for ops in self.ops_per_graph],
            "guards": [list(g) for g in self.guards],
            "unsupported": list(self.unsupported),
        }

    def __str__(self) -> str:
        lines = [f"{self.graph_count} graph(s), {self.graph_break_count} graph break(s)"]
        if self.ops_per_graph:
            lines.append("")
            lines.append(f"{'graph':>5}  {'ops':>4}  first ops")
            for i, ops in enumerate(self.ops_per_graph):
                head = ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "")
                lines.append(f"{i:>5}  {len(ops):>4}  {head}")
        if self.breaks:
            lines.append("")
            lines.append("graph breaks:")
            for i, b in enumerate(self.breaks):
                lines.append(f"  {i + 1}. {b.filename}:{b.lineno}: {b.reason}")
                if b.source_line:
                    lines.append(f"       {b.source_line}")
                if b.hint:
                    lines.append(f"       hint: {b.hint}")
        for u in self.unsupported:
            lines.append(f"ran eagerly: {u}")
        return "\n".join(lines)


def _op_name(node) -> str:
    t = node.target
    if isinstance(t, str):
        return t
    mod = getattr(t, "__module__", None) or ""
    name = getattr(t, "__name__", None) or str(t)
    if mod.startswith("torch.nn.functional"):
        return f"F.{name}"
    if mod.startswith("torch"):
        return f"torch.{name}"
    return f"{mod}.{name}" if mod and mod != "builtins" and mod != "_operator" else name


def explain(fn: Callable[..., Any]) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs) -> ExplainOutput``: capture without compiling (graphs run as
    they are), counting graphs and recording every graph break with its reason, place and hint."""

    def run(*args, **kwargs):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        wrapped = capture(fn, backend)
        captured = wrapped._captured if isinstance(wrapped, CapturedModule) else wrapped
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped(*args, **kwargs)
        ctx = captured.ctx
        ops = [
            [
                _op_name(n)
                for n in g.graph.nodes
                if n.op in ("call_function", "call_method", "call_module")
            ]
            for g in graphs
        ]
        by_graph = {
            id(e.graph_module): e
            for f in ctx.functions
            for e in f.entries
            if e.graph_module is not None
        }
        guards = [
            [g.summary() for g in by_graph[id(gm)].guards.guards] if id(gm) in by_graph else []
            for gm in graphs
        ]
        unsupported = [
            str(f.unsupported) for f in ctx.functions if isinstance(f.unsupported, Unsupported)
        ]
        return ExplainOutput(len(graphs), graphs, ops, list(ctx.breaks), guards, unsupported)

    return run
