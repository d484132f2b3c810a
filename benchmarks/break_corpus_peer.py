"""Graph counts of the graph-break corpus (packages/dynamo-capture/tests/breaks) under torchkiln's
capture and under TorchDynamo (``torch.compile(backend=<counting>)``), program by program.

It lives in benchmarks/ because nothing under packages/ may call torch.compile. Prints one line
per program whose counts differ, or that fails under either (TorchDynamo's failures included:
they are what "pass rate at least TorchDynamo's" is measured against), then a summary.

    python benchmarks/break_corpus_peer.py [substring ...]
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import torch
import torch._dynamo

BREAKS = Path(__file__).resolve().parents[1] / "packages" / "dynamo-capture" / "tests" / "breaks"
sys.path.insert(0, str(BREAKS))

import _breaks_harness as harness  # noqa: E402 - after the corpus folder is on sys.path


def _ops(graphs: list) -> int:
    """Operations in the graphs (what was compiled rather than run in Python)."""
    return sum(
        n.op in ("call_function", "call_method", "call_module")
        for gm in graphs
        for n in gm.graph.nodes
    )


def _count(p: harness.BreakProgram, peer: str) -> tuple[int | None, int, str]:
    """(graphs of the first call, their operations, "" or why the program failed) under one peer."""
    fn = p.make_fn()
    backend = harness.CountingBackend()
    if peer == "dynamo":
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend)
    else:
        from torchkiln_dynamo_capture import capture

        compiled = capture(fn, backend)
    try:
        harness.compare_call(p, fn, compiled, "first call")
        first = backend.calls
        harness.compare_call(p, fn, compiled, "second call")
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return (
            backend.calls,
            _ops(backend.graphs),
            f"{type(e).__name__}: {str(e).splitlines()[0][:160]}",
        )
    extra = backend.calls - first
    return (
        first,
        _ops(backend.graphs[:first]),
        (f"second call compiled {extra} more" if extra else ""),
    )


def main(filters: list[str]) -> None:
    for path in sorted(BREAKS.glob("breaks_*.py")):
        importlib.import_module(path.stem)
    programs = [p for p in harness.REGISTRY if not filters or any(f in p.id for f in filters)]
    more = fewer = tk_fail = dy_fail = fewer_ops = 0
    for p in programs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tk, tk_ops, tk_why = _count(p, "torchkiln")
            dy, dy_ops, dy_why = _count(p, "dynamo")
        tk_fail += bool(tk_why)
        dy_fail += bool(dy_why)
        if tk is not None and dy is not None and not tk_why and not dy_why:
            more += tk > dy
            fewer += tk < dy
            fewer_ops += tk_ops < dy_ops
        if tk != dy or tk_why or dy_why:
            print(
                f"{p.id}: torchkiln {tk} graphs/{tk_ops} ops {tk_why!r} | dynamo {dy}/{dy_ops} "
                f"{dy_why!r} | corpus {p.graphs}",
                flush=True,
            )
    print(
        f"{len(programs)} programs: torchkiln fails {tk_fail}, dynamo fails {dy_fail}; where both "
        f"pass, torchkiln has more graphs on {more}, fewer on {fewer}, and compiles fewer "
        f"operations than dynamo on {fewer_ops}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
