"""What one compiled function did: a ``CompileReport`` with one ``GraphReport`` per compiled graph.

The pipeline records into a ``ReportRecorder`` owned by the compiled function (no global state);
``torchkiln.report(compiled)`` takes a frozen snapshot.
"""

from __future__ import annotations

import io
import weakref
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GraphReport:
    """One graph that went through the pipeline.

    fx_nodes: nodes of the torch-level FX graph capture handed the backend.
    kernels: generated kernels (forward and, when traced, backward): launch sites, one per
        kernel step of the graphs.
    distinct_kernels: of those, the distinct kernel functions: codegen-triton names a function
        from its text, so launch sites of identical code (a model's repeated layers) share one,
        compiled once (a backend that shares nothing counts each launch site).
    extern_calls: ATen ops run as named extern kernels (e.g. "aten.mm").
    fallbacks: ATen ops with no lowering, run as their eager ATen kernel.
    compile_seconds: wall time of the backend for this graph.
    source_path: the generated wrapper module on disk ("" when none was written).
    phases: seconds per pipeline phase, forward and backward graphs added up: "aot" (tracing,
        functionalization, partitioning), "lowering", "scheduling", "codegen" (kernel code and
        builds), "wrapper", "cache_key", "cache_load", "cache_store". A backward graph compiled
        at the first backward call adds its phases then (compile_seconds is the forward's).
    cache: the graph cache's verdict: "hit", "miss", "corrupt: <why>" (compiled again),
        "off: <why>" (not cached), or "" (before any verdict).
    artifacts: every file the graph's code lives in, forward and backward: "forward.wrapper",
        "forward.kernel.<name>", "backward.wrapper", ... -> path; and "debug_dir" -> the graph's
        folder when ``TORCHKILN_DEBUG_DIR`` / ``debug_dir`` was set.
    perf_hints: what likely costs speed (``perf_hints.py``): ATen fallbacks, unfused reductions,
        unfused producer/consumer pairs, early fusion stops, skipped CUDA graphs.
    convolutions: one line per convolution of the compiled graphs: how it runs (oneDNN with the
        activation or residual add fused, a matrix multiply, ATen's) and why an epilogue was not
        fused (loop-ir's ``CompiledGraph.convolution_log``; empty for a graph from the cache).
    linears: one line per linear layer (``addmm``/``mm`` of a weight input) on the CPU: oneDNN
        with a prepacked weight and its epilogue fused, with the compile-time timings that chose
        it, or why it stays ``addmm``; on CUDA, each product followed by ReLU or the tanh GELU:
        ``_addmm_activation`` (the activation in cuBLASLt's epilogue) with its timings, or why
        not; and the padded products (loop-ir's ``CompiledGraph.linear_log``).
    attention: one line per attention decision of aot-partition: an input-free mask of a
        ``scaled_dot_product_attention`` call dropped or made ``is_causal`` (or kept, and why;
        ``sdpa_masks.py``), hand-written attention routed to SDPA or left, and why
        (``attention.py``). Empty for a graph from the cache.
    part_kernels, part_fallbacks: ``kernels`` and ``fallbacks`` split by part, "forward" and
        "backward" (a training graph's backward, compiled at the first backward call; every
        backward variant added up). An inference graph has a forward only.
    saved_activation_bytes: for a training graph, the bytes its forward saves for the backward
        beyond what the caller holds anyway (parameters, inputs): aot-partition's min-cut figure
        (``saved_activation_bytes``), symbolic sizes evaluated at the compiling call's inputs.
        None for an inference graph (nothing saved) or when unknown.
    """

    index: int
    fx_nodes: int
    kernels: int
    extern_calls: list[str]
    fallbacks: list[str]
    compile_seconds: float
    source_path: str
    device: str = "cpu"
    cudagraphs: str = ""  # "" when not asked; "on" or the reason it was skipped
    phases: dict[str, float] = field(default_factory=dict)
    cache: str = ""
    convolutions: list[str] = field(default_factory=list)
    linears: list[str] = field(default_factory=list)
    attention: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)
    perf_hints: list[str] = field(default_factory=list)
    distinct_kernels: int = 0
    part_kernels: dict[str, int] = field(default_factory=dict)
    part_fallbacks: dict[str, list[str]] = field(default_factory=dict)
    saved_activation_bytes: int | None = None

    @property
    def source_paths(self) -> list[str]:
        """The wrapper of every compiled part (forward, then backward once compiled)."""
        return [p for k, p in self.artifacts.items() if k.endswith(".wrapper")]


@dataclass(frozen=True)
class EagerFallback:
    """A graph (or the whole function) that runs eagerly because the pipeline failed on it."""

    index: int  # graph index, -1 for the whole function (capture itself failed)
    fx_nodes: int
    reason: str  # one line
    repro: str = ""  # the standalone repro script written for this graph ("" when none)


@dataclass(frozen=True)
class CompileReport:
    graphs: list[GraphReport]
    eager_fallbacks: list[EagerFallback]
    graph_breaks: list[str] = field(default_factory=list)  # reasons, when capture reports them
    ddp_bucket_splits: list[str] = field(default_factory=list)  # graphs split at DDP's buckets

    @property
    def num_graphs(self) -> int:
        """Graphs capture produced: compiled ones plus those that fell back to eager."""
        return len(self.graphs) + sum(1 for f in self.eager_fallbacks if f.index >= 0)

    @property
    def num_kernels(self) -> int:
        """Kernel launch sites of every compiled graph (forward and backward)."""
        return sum(g.kernels for g in self.graphs)

    @property
    def num_distinct_kernels(self) -> int:
        """Distinct kernel functions, summed per graph (one function shared by two graphs of a
        graph break counts in each)."""
        return sum(g.distinct_kernels for g in self.graphs)

    @property
    def compile_seconds(self) -> float:
        return sum(g.compile_seconds for g in self.graphs)

    def __str__(self) -> str:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="torchkiln compile report")
        for name in (
            "graph",
            "fx nodes",
            "kernels",
            "extern calls",
            "fallbacks",
            "compile s",
            "source",
        ):
            table.add_column(name, overflow="fold")
        for g in self.graphs:
            table.add_row(
                str(g.index),
                str(g.fx_nodes),
                str(g.kernels),
                ", ".join(g.extern_calls) or "-",
                ", ".join(g.fallbacks) or "-",
                f"{g.compile_seconds:.3f}",
                "\n".join(
                    [
                        *g.source_paths,
                        *([g.artifacts["debug_dir"]] if "debug_dir" in g.artifacts else []),
                    ]
                )
                or g.source_path
                or "-",
            )
        for f in self.eager_fallbacks:
            name = "whole fn" if f.index < 0 else str(f.index)
            reason = f.reason + (f" (repro: {f.repro})" if f.repro else "")
            table.add_row(name, str(f.fx_nodes), "eager", "-", "-", "-", reason)
        buffer = io.StringIO()
        console = Console(file=buffer, width=140, color_system=None)
        console.print(table)
        breaks = len(self.graph_breaks)
        console.print(
            f"graphs: {self.num_graphs}, graph breaks: {breaks}, "
            f"eager fallbacks: {len(self.eager_fallbacks)}"
        )
        for reason in self.graph_breaks:
            console.print(f"  graph break: {reason}")
        for g in self.graphs:
            for hint in g.perf_hints:
                console.print(f"  graph {g.index} perf hint: {hint}")
        for split in self.ddp_bucket_splits:
            console.print(f"  ddp: {split}")
        return buffer.getvalue()


class ReportRecorder:
    """Mutable, per compiled function: the pipeline appends, ``snapshot()`` freezes."""

    def __init__(self) -> None:
        self._graphs: list[GraphReport] = []
        self._fallbacks: list[EagerFallback] = []
        self._bucket_splits: list[str] = []
        self._next_index = 0
        # debug-dir folders still waiting for their guards, which capture compiles only after the
        # backend returns: (weak FX graph, GraphDump), taken by the compiled function after a call
        self._pending_dumps: list[tuple[Any, Any]] = []

    def new_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def add_graph(self, report: GraphReport) -> None:
        self._graphs.append(report)

    def replace_graph(self, index: int, report: GraphReport) -> None:
        self._graphs = [report if g.index == index else g for g in self._graphs]

    def add_dump(self, gm: Any, dump: Any) -> None:
        self._pending_dumps.append((weakref.ref(gm), dump))

    @property
    def has_pending_dumps(self) -> bool:
        return bool(self._pending_dumps)

    def take_pending_dumps(self) -> list[tuple[Any, Any]]:
        """The (FX graph, GraphDump) pairs waiting for guards, forgotten once taken."""
        taken, self._pending_dumps = self._pending_dumps, []
        return [(gm, dump) for ref, dump in taken if (gm := ref()) is not None]

    def add_bucket_split(self, description: str) -> None:
        self._bucket_splits.append(description)

    def clear(self) -> None:
        """Forget every graph and fallback (``torchkiln.reset()``); indices start again at 0."""
        self._graphs, self._fallbacks, self._next_index = [], [], 0
        self._bucket_splits = []
        self._pending_dumps = []

    def add_fallback(self, fallback: EagerFallback) -> None:
        # A graph that compiled and then failed at run time moves from graphs to fallbacks.
        self._graphs = [g for g in self._graphs if g.index != fallback.index or fallback.index < 0]
        self._fallbacks.append(fallback)

    def snapshot(
        self,
        graph_breaks: list[str] | None = None,
        extra_fallbacks: list[EagerFallback] | None = None,
    ) -> CompileReport:
        fallbacks = list(self._fallbacks) + list(extra_fallbacks or [])
        return CompileReport(
            list(self._graphs), fallbacks, list(graph_breaks or []), list(self._bucket_splits)
        )
