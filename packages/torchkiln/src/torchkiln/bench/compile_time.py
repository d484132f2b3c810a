"""``python -m torchkiln bench --compile-time``: compile seconds of a transformer encoder by depth.

For each depth in ``--layers`` and each step (inference; training = forward, sum loss, backward),
each compiler (torchkiln, and torch.compile unless ``--no-peer``) compiles the encoder twice, each
time in a NEW process: "cold" with an empty cache directory, "warm" with the directory the cold
process left (torchkiln: ``TORCHKILN_CACHE_DIR``, its graph cache and kernel builds;
torch.compile: ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``).

In each process a one-op function is compiled first, so one-time imports and initialisation are
not charged to the first depth; then the compile time is the first compiled step's wall time
minus an eager step's. torchkiln's seconds are split into its phases from the compile report
(``GraphReport.phases``: aot, lowering, scheduling, codegen, wrapper, cache_*); "capture" is the
rest (bytecode capture, guards, and the first step's own run).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import torchkiln
from torchkiln.bench import meta
from torchkiln.bench._peer import peer_compile

PHASES = (
    "capture",
    "aot",
    "lowering",
    "scheduling",
    "codegen",
    "wrapper",
    "cache_key",
    "cache_load",
    "cache_store",
)


def build_encoder(layers: int, hidden: int, seq: int, batch: int) -> tuple[Any, Any]:
    """A BERT-like encoder (post-norm, GELU, 4x feed-forward) of ``layers`` layers, no dropout.

    PyTorch's inference fast path (one fused ATen call per layer) is turned off: both compilers
    then compile the layers' own ops, as in training."""
    torch.backends.mha.set_fastpath_enabled(False)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        hidden,
        max(1, hidden // 16),
        4 * hidden,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
    )
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    return model, torch.randn(batch, seq, hidden)


def _step(fn: Any, x: Any, train: bool) -> None:
    if train:
        fn(x).sum().backward()
    else:
        with torch.no_grad():
            fn(x)


def _warm_up(compiler: str) -> None:
    """Compile and run a one-op function: imports and one-time setup are paid here."""

    def tiny(x: Any) -> Any:
        return torch.relu(x) + 1.0

    x = torch.randn(4, 4, requires_grad=True)
    fn = _compiler(compiler)(tiny)
    fn(x).sum().backward()


def _compiler(name: str) -> Any:
    if name == "torchkiln":
        return lambda f: torchkiln.compile(f, options={"strict": True})
    return peer_compile


def measure(job: dict[str, Any]) -> dict[str, Any]:
    """One compile in this process (run by ``worker``): seconds, phases, cache verdicts."""
    model, x = build_encoder(job["layers"], job["hidden"], job["seq"], job["batch"])
    model = model.to(device=job["device"], dtype=getattr(torch, job["dtype"]))
    x = x.to(device=job["device"], dtype=getattr(torch, job["dtype"]))
    train = job["train"]
    if not train:
        model.eval()
    _warm_up(job["compiler"])
    eager = []
    for _ in range(3):  # the first eager step pays one-time costs; keep the fastest
        begin = time.perf_counter()
        _step(model, x, train)
        eager.append(time.perf_counter() - begin)
    model.zero_grad(set_to_none=True)
    compiled = _compiler(job["compiler"])(model)
    begin = time.perf_counter()
    _step(compiled, x, train)
    if job["device"] == "cuda":
        torch.cuda.synchronize()
    total = max(0.0, time.perf_counter() - begin - min(eager))
    result: dict[str, Any] = {"total_s": total}
    if job["compiler"] == "torchkiln":
        report = torchkiln.report(compiled)
        phases: dict[str, float] = {}
        for graph in report.graphs:
            for name, seconds in graph.phases.items():
                phases[name] = phases.get(name, 0.0) + seconds
        phases["capture"] = max(0.0, total - sum(phases.values()))
        result.update(
            phases=phases,
            verdicts=sorted({g.cache for g in report.graphs}),
            graphs=report.num_graphs,
            kernels=report.num_kernels,
            distinct_kernels=report.num_distinct_kernels,
            eager_fallbacks=[f.reason for f in report.eager_fallbacks],
        )
    return result


def _run_job(job: dict[str, Any], cache_dir: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    if job["compiler"] == "torchkiln":
        env["TORCHKILN_CACHE_DIR"] = cache_dir
    else:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        env["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    command = [sys.executable, "-m", "torchkiln.bench.compile_time", json.dumps(job)]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit code {proc.returncode}: {tail[0][:200]}"}
    return json.loads(lines[-1])


def run(
    layers: list[int],
    steps: list[str],
    compilers: list[str],
    *,
    hidden: int,
    seq: int,
    batch: int,
    device: str,
    dtype: str,
    timeout: float,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Rows of (layers, step, compiler, cache) with seconds; cold and warm share a directory."""
    rows = []
    for depth in layers:
        for step in steps:
            for compiler in compilers:
                job = {
                    "layers": depth,
                    "train": step == "train",
                    "compiler": compiler,
                    "hidden": hidden,
                    "seq": seq,
                    "batch": batch,
                    "device": device,
                    "dtype": dtype,
                }
                with tempfile.TemporaryDirectory(prefix="torchkiln-compile-time-") as cache_dir:
                    for cache in ("cold", "warm"):
                        if progress is not None:
                            progress(f"{depth} layers, {step}, {compiler}, {cache} cache")
                        result = _run_job(job, cache_dir, timeout)
                        rows.append(
                            {
                                "layers": depth,
                                "step": step,
                                "compiler": compiler,
                                "cache": cache,
                                **result,
                            }
                        )
    return rows


def render(rows: list[dict[str, Any]], title: str) -> str:
    table = Table(title=title)
    for name in ("layers", "step", "compiler", "cache", "total s", *PHASES, "verdict"):
        table.add_column(name.replace("cache_", "cache "), overflow="fold")
    for row in rows:
        phases = row.get("phases", {})
        cells = [f"{phases[p]:.2f}" if p in phases else "-" for p in PHASES]
        total = f"{row['total_s']:.2f}" if "total_s" in row else "-"
        verdict = row.get("error") or ", ".join(row.get("verdicts", [])) or "-"
        if row.get("eager_fallbacks"):
            verdict += f" ({len(row['eager_fallbacks'])} eager fallbacks)"
        table.add_row(
            str(row["layers"]), row["step"], row["compiler"], row["cache"], total, *cells, verdict
        )
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(table)
    for line in summary(rows):
        buffer.write(line + "\n")
    return buffer.getvalue()


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """'torchkiln train 4 layers: cold 10.1 s, warm 2.0 s (5.0x)' per compiler and depth."""
    seconds = {(r["layers"], r["step"], r["compiler"], r["cache"]): r.get("total_s") for r in rows}
    lines = []
    for (depth, step, compiler, cache), cold in seconds.items():
        warm = seconds.get((depth, step, compiler, "warm"))
        if cache == "cold" and cold is not None and warm:
            lines.append(
                f"{compiler} {step} {depth} layers: cold {cold:.2f} s, warm {warm:.2f} s "
                f"({cold / warm:.1f}x)"
            )
    return lines


def command(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """The ``--compile-time`` mode of ``python -m torchkiln bench``."""
    layers = [int(n) for n in args.layers.split(",") if n.strip()]
    steps = ["train"] if args.train else ["inference"] if args.inference else ["inference", "train"]
    compilers = ["torchkiln"] + ([] if args.no_peer else ["torch.compile"])
    show = (
        None
        if args.no_progress
        else (lambda text: print(f"compiling: {text}", file=sys.stderr, flush=True))
    )
    rows = run(
        layers,
        steps,
        compilers,
        hidden=args.hidden,
        seq=args.seq,
        batch=args.batch,
        device=args.device,
        dtype=args.dtype,
        timeout=args.timeout,
        progress=show,
    )
    title = (
        f"compile seconds: transformer encoder, hidden {args.hidden}, seq {args.seq}, "
        f"batch {args.batch} ({args.device}, {args.dtype})"
    )
    print(render(rows, title))
    if args.json_path:
        options = {k: v for k, v in vars(args).items() if k != "func"}
        meta.write_result(args.json_path, meta.collect(args.device, options, argv), rows=rows)
    return 0


def worker(argv: list[str]) -> int:
    print(json.dumps(measure(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(worker(sys.argv[1:]))
