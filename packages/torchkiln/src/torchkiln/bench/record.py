"""What one benchmark row holds, and how a model's measurements fill it.

``BenchConfig`` is what the command line asked for; a ``Row`` is one model's result (the JSON's
``rows`` entries, ``ROW_KEYS`` at least). ``record_report`` copies what torchkiln's compile report
says (graphs, breaks, kernels, fallbacks); ``record_rounds`` turns the interleaved rounds into each
variant's median and spread and the paired ratios of ``PAIRS`` (``paired``); ``record_timings``
times the rounds and the peak memory. Inference (``runner``) and training steps (``train``)
both fill rows through these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from torchkiln.bench import paired, timing
from torchkiln.options import MODE_SETTINGS

DEFAULT_BATCH = 2
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class BenchConfig:
    device: str = "cpu"
    dtype: str = "float32"
    batch: int | None = None  # None: the model's full-size batch (size "full"), else DEFAULT_BATCH
    mode: str = "default"
    peer: bool = True
    repeat: int = 20
    warmup: int = 3
    strict: bool = False
    train: bool = False  # a training step (forward, loss, backward, AdamW) instead of inference
    size: str = "small"  # the suites' model sizes (small: CI/CPU configs; full: default configs)
    clock: str = "wall"  # CPU timings: "wall" (perf_counter) or "cpu" (process CPU time)
    # more torchkiln.compile options (``--options``, a JSON object), as (name, value) pairs
    compile_options: tuple[tuple[str, Any], ...] = ()

    def torchkiln_options(self) -> dict[str, Any]:
        """The options dict each model's ``torchkiln.compile`` gets: ``compile_options`` as given
        (``triton_options`` / ``cpp_options`` as dicts of the code generator's fields, which
        ``torchkiln.compile`` takes, with ``cache_dir`` and ``autotune`` from the compile
        options as for any user's), and ``strict``."""
        return {**dict(self.compile_options), "strict": self.strict}


ROW_KEYS = (
    "model",
    "suite",
    "device",
    "dtype",
    "batch",
    "eager_ms",
    "torchkiln_ms",
    "inductor_ms",
    "speedup",
    "inductor_speedup",
    "vs_inductor",
    "verdict",
    "paired",
    "rounds_ms",
    "round_orders",
    "spreads",
    "compile_s",
    "inductor_compile_s",
    "peak_mem_mb",
    "inductor_peak_mem_mb",
    "graphs",
    "graph_breaks",
    "kernels",
    "kernels_fw",
    "kernels_bw",
    "op_fallbacks",
    "op_fallbacks_fw",
    "op_fallbacks_bw",
    "saved_bytes",
    "eager_saved_bytes",
    "accuracy",
    "task",
)


@dataclass
class Row:
    model: str
    suite: str
    device: str
    dtype: str
    batch: int
    task: str = "infer"  # "infer" or "train" (a training step)
    eager_ms: float | None = None  # medians of the timed rounds
    torchkiln_ms: float | None = None
    inductor_ms: float | None = None
    #: medians of the per-round ratios eager/torchkiln, eager/torch.compile and
    #: torch.compile/torchkiln (>1: torchkiln faster); their intervals are in ``paired``
    speedup: float | None = None
    inductor_speedup: float | None = None
    vs_inductor: float | None = None
    #: torchkiln against torch.compile: paired.AHEAD, BEHIND or TIE (the interval holds 1.0)
    verdict: str | None = None
    compile_s: float | None = None
    inductor_compile_s: float | None = None
    peak_mem_mb: float | None = None
    inductor_peak_mem_mb: float | None = None
    eager_peak_mem_mb: float | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    eager_fallbacks: int | None = None
    #: kernel launch sites of the compiled graphs (each kernel step of each graph)
    kernels: int | None = None
    #: of those, distinct kernel functions (launch sites of identical code share one: the Triton
    #: code generator compiles it once); summed per graph
    distinct_kernels: int | None = None
    #: ``kernels`` split into the forward graphs' and the backward graphs' (a training step;
    #: an inference row has its kernels in ``kernels_fw`` and 0 in ``kernels_bw``)
    kernels_fw: int | None = None
    kernels_bw: int | None = None
    #: ATen ops with no lowering in the compiled graphs (run as their eager kernel), sorted;
    #: and the same split by the part (forward, backward) they run in
    op_fallbacks: list[str] = field(default_factory=list)
    op_fallbacks_fw: list[str] = field(default_factory=list)
    op_fallbacks_bw: list[str] = field(default_factory=list)
    #: a training step: the bytes torchkiln's forward graphs save for the backward beyond the
    #: parameters and inputs (aot-partition's min-cut figure at the bench's input sizes, summed
    #: over the graphs); ``eager_saved_bytes`` is eager's, measured with autograd's saved-tensor
    #: hooks over the model's forward (the loss, run eagerly by both, left out)
    saved_bytes: int | None = None
    eager_saved_bytes: int | None = None
    #: aot-partition's attention decisions (``GraphReport.attention``), distinct lines with how
    #: many calls each: a mask made ``is_causal`` or dropped, or kept and why
    attention: dict[str, int] = field(default_factory=dict)
    accuracy: str = "error: not run"
    inductor_accuracy: str | None = None
    notes: list[str] = field(default_factory=list)
    #: variant ("eager", "torchkiln", "inductor") -> its runs' spread (timing.Spread.as_dict, ms)
    spreads: dict[str, dict[str, float]] = field(default_factory=dict)
    #: "speedup", "inductor_speedup", "vs_inductor" -> paired.PairedRatio fields (median, the
    #: interval low/high and its confidence, quartiles q1/q3, rounds)
    paired: dict[str, dict[str, float]] = field(default_factory=dict)
    #: variant -> its time in each round (ms), aligned by round; ``round_orders[r]`` is the order
    #: round r ran them in
    rounds_ms: dict[str, list[float]] = field(default_factory=dict)
    round_orders: list[list[str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cast_to(value: Any, device: str, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return (
            value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device)
        )
    return value


def record_report(row: Row, report: Any) -> None:
    """Graphs, kernels, breaks and fallbacks of a ``torchkiln.report`` into ``row``."""
    row.graphs, row.kernels = report.num_graphs, report.num_kernels
    row.distinct_kernels = report.num_distinct_kernels
    row.eager_fallbacks = len(report.eager_fallbacks)
    row.op_fallbacks = sorted({op for g in report.graphs for op in g.fallbacks})
    parts = [getattr(g, "part_kernels", {}) for g in report.graphs]
    row.kernels_fw = sum(p.get("forward", 0) for p in parts)
    row.kernels_bw = sum(p.get("backward", 0) for p in parts)
    for part, attr in (("forward", "op_fallbacks_fw"), ("backward", "op_fallbacks_bw")):
        ops = {op for g in report.graphs for op in getattr(g, "part_fallbacks", {}).get(part, ())}
        setattr(row, attr, sorted(ops))
    row.attention = {}
    for g in report.graphs:
        for line in getattr(g, "attention", ()):
            what = line.split(": ", 1)[-1]  # the decision, without the node's name
            row.attention[what] = row.attention.get(what, 0) + 1
    saved = [g.saved_activation_bytes for g in report.graphs]
    known = [b for b in saved if b is not None]
    row.saved_bytes = sum(known) if known else None
    row.graph_breaks = (
        len(report.graph_breaks) if report.graph_breaks else max(0, report.num_graphs - 1)
    )


#: the paired ratios a row reports: name -> (reference variant, candidate variant); the ratio is
#: reference time / candidate time per round, so >1 means the candidate is faster
PAIRS = {
    "speedup": ("eager", "torchkiln"),
    "inductor_speedup": ("eager", "inductor"),
    "vs_inductor": ("inductor", "torchkiln"),
}


def record_rounds(row: Row, times: dict[str, list[float]]) -> None:
    """Medians, spreads and paired ratios of per-round ``times`` (variant -> ms per round)."""
    row.rounds_ms = {v: list(values) for v, values in times.items()}
    rounds = len(next(iter(times.values()), []))
    row.round_orders = [timing.round_order(list(times), r) for r in range(rounds)]
    row.spreads = {v: timing.spread(values).as_dict() for v, values in times.items()}
    row.eager_ms = timing.median(times["eager"])
    row.torchkiln_ms = timing.median(times["torchkiln"])
    if "inductor" in times:
        row.inductor_ms = timing.median(times["inductor"])
    row.paired = {}
    for name, (reference, candidate) in PAIRS.items():
        if reference in times and candidate in times:
            ratio = paired.paired_ratio(times[reference], times[candidate])
            row.paired[name] = dataclasses.asdict(ratio)
            setattr(row, name, ratio.median)
            if name == "vs_inductor":
                row.verdict = ratio.verdict


def record_timings(
    row: Row, fns: dict[str, Callable[[], Any]], config: BenchConfig, timer: Any
) -> None:
    """Interleaved rounds (``record_rounds``) and peak memory of each variant in ``fns``
    ("eager", "torchkiln", and "inductor" when the peer compiled)."""
    record_rounds(
        row, timing.interleaved(fns, repeat=config.repeat, warmup=config.warmup, measure=timer.ms)
    )
    row.eager_peak_mem_mb = peak_memory_mb(fns["eager"], config.device)
    row.peak_mem_mb = peak_memory_mb(fns["torchkiln"], config.device)
    if "inductor" in fns:
        row.inductor_peak_mem_mb = peak_memory_mb(fns["inductor"], config.device)
    if MODE_SETTINGS.get(config.mode, {}).get("cudagraphs") and row.peak_mem_mb is not None:
        row.notes.append(
            "peak memory: above what was allocated before the call, so without the memory the "
            "compilers' CUDA graphs keep between calls (their recorded activations and outputs)"
        )
    elif peak_above_eager(row):
        row.notes.append(
            f"peak memory {row.peak_mem_mb:.1f} MB is above eager's "
            f"{row.eager_peak_mem_mb:.1f} MB (the goal: at most eager's)"
        )


def peak_above_eager(row: Row) -> bool:
    """Whether torchkiln's measured peak memory exceeds eager's (False when either is unknown)."""
    return (
        row.peak_mem_mb is not None
        and row.eager_peak_mem_mb is not None
        and row.peak_mem_mb > row.eager_peak_mem_mb
    )


def peak_memory_mb(fn: Callable[[], Any], device: str) -> float | None:
    """Peak memory of one call above what was allocated before it, in MB; None on CPU.

    On CPU the process high-water mark (ru_maxrss) only ever grows, so it cannot be reset per model
    and per compiler: we report "-" rather than a misleading number.
    """
    if torch.device(device).type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20
