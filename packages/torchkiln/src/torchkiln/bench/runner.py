"""Runs one model eagerly, through torchkiln.compile and through torch.compile, and makes a ``Row``.

Per model: build (deterministic), cast to device/dtype, one eager call (its wall time is what the
compile time is measured against), the first compiled call of each compiler (compile time = its
wall time minus the eager call's), peak memory of a call of each (CUDA only), warm-up, interleaved
timed rounds (each variant's median, and every speedup as the median of its per-round ratios with
an interval: ``paired``), and the accuracy of torchkiln's output against an fp64 eager reference.
A model's failure becomes its row's ``accuracy = "error: ..."`` and never stops the run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import torchkiln
from torchkiln.bench import accuracy, timing
from torchkiln.bench._peer import peer_compile, reset_peer
from torchkiln.bench.record import (
    DEFAULT_BATCH,
    DTYPES,
    BenchConfig,
    Row,
    cast_to,
    record_report,
    record_timings,
)
from torchkiln.bench.suites import ModelSpec
from torchkiln.bench.train import run_train
from torchkiln.pipeline import one_line


def run_model(
    spec: ModelSpec, config: BenchConfig, status: Callable[[str], None] = lambda _: None
) -> Row:
    """Benchmark one model; every failure is caught and recorded in the row."""
    batch = (
        config.batch
        if config.batch is not None
        else (spec.batch if spec.batch is not None and config.size == "full" else DEFAULT_BATCH)
    )
    row = Row(
        spec.name,
        spec.suite,
        config.device,
        config.dtype,
        batch,
        task="train" if config.train else "infer",
    )
    try:
        if config.train:
            run_train(spec, config, row, status)
        else:
            _run(spec, config, row, status)
    except Exception as error:  # noqa: BLE001 - one model must not stop the run
        row.accuracy = f"error: {one_line(error, 160)}"
    finally:
        reset_peer()
    return row


def _run(spec: ModelSpec, config: BenchConfig, row: Row, status: Callable[[str], None]) -> None:
    dtype = DTYPES[config.dtype]
    status(f"{spec.name}: building")
    model, inputs = spec.build(row.batch)
    model64, inputs64 = accuracy.fp64_copy(model, inputs)
    model64 = model64.to(config.device)
    inputs64 = tuple(cast_to(v, config.device, torch.float64) for v in inputs64)
    model = model.to(device=config.device, dtype=dtype).eval()
    inputs = tuple(cast_to(v, config.device, dtype) for v in inputs)
    timer = timing.Timer(config.device, config.clock)
    with torch.no_grad():
        reference = model64(*inputs64)
        del model64, inputs64  # its memory must not count in the peak of what follows

        def eager():
            return model(*inputs)

        eager_call_s, eager_out = timer.wall(eager)
        eager_call_s = min(eager_call_s, timer.wall(eager)[0])  # the first call pays one-time costs

        status(f"{spec.name}: compiling with torchkiln")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torchkiln.compile(
                model, mode=config.mode, options=config.torchkiln_options()
            )
            first_s, compiled_out = timer.wall(lambda: compiled(*inputs))
        row.notes += sorted({str(w.message) for w in caught if "torchkiln" in str(w.message)})
        row.compile_s = timing.compile_seconds(first_s, eager_call_s)
        verdict = accuracy.compare(compiled_out, eager_out, reference, dtype)
        row.accuracy = verdict.text
        if not verdict.passed:
            row.notes.append(f"accuracy: {verdict.detail}")
        record_report(row, torchkiln.report(compiled))
        fns: dict[str, Callable[[], Any]] = {"eager": eager, "torchkiln": lambda: compiled(*inputs)}

        if config.peer:
            status(f"{spec.name}: compiling with torch.compile")
            try:
                peer = peer_compile(model, mode=config.mode)
                peer_first_s, peer_out = timer.wall(lambda: peer(*inputs))
                row.inductor_compile_s = timing.compile_seconds(peer_first_s, eager_call_s)
                peer_verdict = accuracy.compare(peer_out, eager_out, reference, dtype)
                row.inductor_accuracy = peer_verdict.text
                fns["inductor"] = lambda: peer(*inputs)
            except Exception as error:  # noqa: BLE001 - the peer failing is a note, not our failure
                row.notes.append(f"torch.compile failed: {one_line(error, 160)}")

        status(f"{spec.name}: timing ({config.repeat} interleaved runs)")
        record_timings(row, fns, config, timer)


def run_models(
    specs: Sequence[ModelSpec],
    config: BenchConfig,
    progress: bool = True,
    on_row: Callable[[list[Row]], None] | None = None,
) -> list[Row]:
    """Every model in turn, with a rich progress bar naming what is being compiled or run.

    `on_row` sees the rows so far after each model: a long run stopped by a time limit still
    leaves the models it finished (the command line writes its JSON there)."""
    rows: list[Row] = []
    if not progress:
        for spec in specs:
            rows.append(run_model(spec, config))
            if on_row is not None:
                on_row(rows)
        return rows
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("models", total=len(specs))
        for spec in specs:
            rows.append(run_model(spec, config, lambda text: bar.update(task, description=text)))
            bar.advance(task)
            if on_row is not None:
                on_row(rows)
    return rows
