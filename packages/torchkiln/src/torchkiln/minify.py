"""``python -m torchkiln minify <repro.py>``: shrink a failing repro script's graph.

The script (``repro.py``) gives the graph, its inputs, the options and ``check``, which says
how the compile fails. A candidate keeps the failure when ``check`` fails the same way (the same
exception type, or "accuracy" for a wrong result; "eager" failures never count: the candidate
graph itself is broken). Two passes, then the smallest graph is written as ``<script>_min.py``
(a repro script like the first):

1. nodes: first the earliest node that still fails as the graph's only output (what comes
   after it goes); then cut chunks of the computing nodes, halves first, then quarters, down to
   single nodes (delta debugging): a cut node becomes a graph input holding its eager value, and
   what only it needed is dead code and goes.
2. fusions: if the failure persists with no fusion at all (``max_fusions=0``) that is kept;
   otherwise the scheduler's fuel is bisected for the fewest fusions that still fail, so the
   last one taken is the culprit (its line in the fusion log, ``TORCHKILN_LOGS=fusion``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from torchkiln.repro import NotReproducible, load_script, repro_source

COMPUTE = ("call_function", "call_method")
#: fuel beyond which bisecting gives up and leaves ``max_fusions`` unlimited
MAX_FUEL = 1 << 12


def failure_kind(failure: str | None) -> str | None:
    """ "UnsupportedOp" from "UnsupportedOp: ...", "accuracy" from "accuracy: ..."."""
    return None if failure is None else failure.split(":", 1)[0]


@dataclass
class Candidate:
    """The original graph with ``cut`` nodes turned into inputs, returning one node ``output``
    (None: the original outputs)."""

    cut: frozenset[str] = frozenset()
    output: str | None = None


class Minifier:
    def __init__(
        self,
        gm: torch.fx.GraphModule,
        inputs: list[Any],
        options: dict[str, Any],
        check: Callable[..., str | None],
        log: Callable[[str], None] = print,
    ) -> None:
        self.gm, self.inputs, self.options = gm, inputs, dict(options)
        self.check, self.log = check, log
        self.values = _eager_values(gm, inputs)
        self.failure = check(gm, inputs, self.options)
        if failure_kind(self.failure) in (None, "eager"):
            raise NotReproducible(f"the repro does not fail ({self.failure or 'it passes'})")
        self.kind = failure_kind(self.failure)
        self.attempts = 0

    # -- building a candidate -----------------------------------------------------------------
    def build(self, cand: Candidate) -> tuple[torch.fx.GraphModule, list[Any]]:
        graph = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        inputs: list[tuple[torch.fx.Node, Any]] = []
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, self.inputs):
            env[node] = graph.placeholder(node.name)
            inputs.append((env[node], value))
        output = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                output = node
                continue
            if node.name in cand.cut:  # moved before the computing nodes below
                env[node] = graph.placeholder(f"{node.name}_in")
                inputs.append((env[node], self.values[node.name]))
            else:
                env[node] = graph.node_copy(node, lambda n: env[n])
        results = output.args[0]
        if cand.output is not None:
            results = (next(n for n in self.gm.graph.nodes if n.name == cand.output),)
        graph.output(torch.fx.graph.map_arg(results, lambda n: env[n]))
        graph.eliminate_dead_code()
        kept = []
        for node, value in inputs:
            if node.users:
                kept.append((node, value))
            else:
                graph.erase_node(node)
        # placeholders first, in the order their values are passed
        first = next((n for n in graph.nodes if n.op != "placeholder"), None)
        for node, _ in kept:
            first.prepend(node)
        gm = torch.fx.GraphModule(self.gm, graph)
        return gm, [v.detach().clone() if isinstance(v, torch.Tensor) else v for _, v in kept]

    def fails(self, cand: Candidate, options: dict[str, Any] | None = None) -> bool:
        gm, inputs = self.build(cand)
        if _compute_nodes(gm) == 0:
            return False
        self.attempts += 1
        return failure_kind(self.check(gm, inputs, options or self.options)) == self.kind

    # -- the passes -----------------------------------------------------------------------------
    def shrink_nodes(self) -> Candidate:
        names = [
            n.name
            for n in self.gm.graph.nodes
            if n.op in COMPUTE and _cuttable(self.values.get(n.name))
        ]
        cand = Candidate()
        # the earliest node that fails as the only output: what follows it goes
        for name in names:
            if isinstance(self.values.get(name), torch.Tensor) and self.fails(
                Candidate(output=name)
            ):
                cand = Candidate(output=name)
                break
        chunk = max(1, len(names) // 2)
        while True:
            changed = False
            live = [n for n in names if n not in cand.cut and n in _node_names(self.build(cand)[0])]
            for start in range(0, len(live), chunk):
                trial = Candidate(cand.cut | frozenset(live[start : start + chunk]), cand.output)
                if self.fails(trial):
                    cand, changed = trial, True
            if chunk == 1 and not changed:
                break
            if not changed:
                chunk = max(1, chunk // 2)
        return cand

    def bisect_fusions(self, cand: Candidate) -> dict[str, Any]:
        options = dict(self.options)
        if self.fails(cand, {**options, "max_fusions": 0}):
            self.log("minify: the failure needs no fusion (max_fusions=0 kept)")
            return {**options, "max_fusions": 0}
        low, high = 0, 1  # low passes; find a failing high
        while not self.fails(cand, {**options, "max_fusions": high}):
            low, high = high, high * 2
            if high > MAX_FUEL:
                self.log("minify: no fuel below the limit fails; max_fusions left unlimited")
                return options
        while high - low > 1:
            middle = (low + high) // 2
            if self.fails(cand, {**options, "max_fusions": middle}):
                high = middle
            else:
                low = middle
        self.log(
            f"minify: the failure appears with fusion number {high} (max_fusions={high}: "
            f"TORCHKILN_LOGS=fusion shows it as the last 'fused' line)"
        )
        return {**options, "max_fusions": high}


def _eager_values(gm: torch.fx.GraphModule, inputs: list[Any]) -> dict[str, Any]:
    """Every node's eager value on ``inputs`` (what a cut node's new input holds)."""
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            values[n.name] = result.detach() if isinstance(result, torch.Tensor) else result
            return result

    with torch.no_grad():
        Recorder(gm).run(
            *[x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        )
    return values


def _cuttable(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, int, float, bool))


def _compute_nodes(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in COMPUTE)


def _node_names(gm: torch.fx.GraphModule) -> set[str]:
    return {n.name for n in gm.graph.nodes}


def minify(
    script: str | Path, out: str | Path | None = None, log: Callable[[str], None] = print
) -> Path:
    """Shrink the graph of repro script ``script``; write and return ``<script>_min.py``."""
    script = Path(script)
    module = load_script(script)
    gm, inputs = module.make_graph(), module.make_inputs()
    minifier = Minifier(gm, inputs, dict(module.OPTIONS), module.check, log)
    before = _compute_nodes(gm)
    log(f"minify: {script.name} fails with {minifier.failure}; {before} nodes")
    cand = minifier.shrink_nodes()
    small, small_inputs = minifier.build(cand)
    log(f"minify: {before} -> {_compute_nodes(small)} nodes")
    options = minifier.bisect_fusions(cand)
    failure = module.check(small, small_inputs, options)
    target = Path(out) if out else script.with_name(f"{script.stem}_min.py")
    target.write_text(
        repro_source(
            small,
            small_inputs,
            options,
            f"{failure} (minified from {script.name}: {before} -> "
            f"{_compute_nodes(small)} nodes, {minifier.attempts} attempts)",
            f"minified {script.stem}",
        )
    )
    log(f"minify: wrote {target}")
    return target
