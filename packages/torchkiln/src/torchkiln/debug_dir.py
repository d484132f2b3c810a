"""``TORCHKILN_DEBUG_DIR``: every stage of each compiled graph, written to one folder per graph.

``TORCHKILN_DEBUG_DIR=<dir>`` (or ``options={"debug_dir": <dir>}``) makes the pipeline write, for
each graph capture hands it, ``<dir>/<function>_<n>/`` (n: the graph's index in the report; a
folder already there gets a ``.1``, ``.2`` ... suffix, so runs never overwrite each other)::

    fx_graph.py              the captured torch-level FX graph, with the example inputs' metadata
    aten_forward.py          the ATen forward graph aot-partition handed the compiler
    aten_backward.py         the ATen backward graph (training; written at the first backward)
    loop_ir_<part>.txt       the lowered loop IR (buffers and their bodies)
    schedule_<part>.txt      the schedule: kernels with their stages, extern calls, frees
    fusion_<part>.txt        every fusion decision: accepted, and rejected with the reason
    wrapper_<part>.py        the generated wrapper (C++ or Triton code generator alike)
    kernels_<part>/          each generated kernel's source, named after the kernel
    costs_<part>.json        each step's floor: the bytes a kernel must move, the FLOPs of an
                             extern matmul or convolution (loop-ir's ``costs.py``), with the
                             function each launch site launches: a profile's times divided by
                             them are achieved bandwidth and FLOP/s
    guards.py                the capture entry's generated guard check (torchkiln.compile only)
    timing.json              seconds per phase (summed, and per part), compile seconds, graph
                             cache verdict
    perf_hints.txt           ATen fallbacks, unfused reductions and pairs, early fusion stops
    failure.txt, repro.py    when the graph fell back to eager: why, and a standalone repro

(<part> is ``forward`` or ``backward``.) Each stage's product is written where the pipeline
already holds it (the FX graph capture passed, the ATen graph aot-partition passed to the
compiler, the loop-ir ``CompiledGraph`` with its IR, schedule, fusion log and code): nothing is
computed again for the dump. Writing never breaks compiling: an OS error is one warning and the
dump stops.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch

ENV_VAR = "TORCHKILN_DEBUG_DIR"


def debug_root(configured: str | None) -> Path | None:
    """The debug dir: ``configured`` (CompileOptions.debug_dir), else ``$TORCHKILN_DEBUG_DIR``,
    else None (no dump)."""
    base = configured or os.environ.get(ENV_VAR)
    return Path(base).expanduser() if base else None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "graph"


def function_name(fn: Any, name: str | None = None) -> str:
    """The name a compiled function's folders carry: ``name`` when given (torch.compile's
    ``name=``), else its ``__name__`` (a module: its class)."""
    if name:
        return _safe(str(name))
    if isinstance(fn, torch.nn.Module):
        return _safe(type(fn).__name__)
    return _safe(getattr(fn, "__name__", None) or type(fn).__name__)


def describe_inputs(example_inputs: list[Any]) -> list[str]:
    """One line per graph input: shape, stride, dtype, device, requires_grad (or the value)."""
    lines = []
    for i, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            lines.append(
                f"input {i}: tensor shape={tuple(value.shape)} stride={tuple(value.stride())} "
                f"dtype={value.dtype} device={value.device} requires_grad={value.requires_grad}"
            )
        else:
            lines.append(f"input {i}: {type(value).__name__} {value!r}")
    return lines


class GraphDump:
    """The folder of one compiled graph; each method writes one stage's product."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.broken = False

    @classmethod
    def create(cls, root: Path, function: str, index: int) -> GraphDump | None:
        """A fresh folder ``root/<function>_<index>`` (suffixed when taken), or None after one
        warning when it cannot be made."""
        base = f"{_safe(function)}_{index}"
        try:
            root.mkdir(parents=True, exist_ok=True)
            for k in range(10_000):
                folder = root / (base if k == 0 else f"{base}.{k}")
                try:
                    folder.mkdir()
                    return cls(folder)
                except FileExistsError:
                    continue
            raise FileExistsError(f"{root / base}: every suffix is taken")
        except OSError as error:
            warnings.warn(f"torchkiln: cannot write the debug dir {root}: {error}", stacklevel=3)
            return None

    def write(self, name: str, text: str) -> str:
        """Write ``text`` to ``name`` in the folder; returns the path ("" once writing failed)."""
        if self.broken:
            return ""
        path = self.folder / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text if text.endswith("\n") else text + "\n")
        except OSError as error:
            self.broken = True
            warnings.warn(f"torchkiln: debug dir write failed, dump stopped: {error}", stacklevel=3)
            return ""
        return str(path)

    # -- the stages ---------------------------------------------------------------------------
    def fx_graph(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
        header = "\n".join(f"# {line}" for line in describe_inputs(list(example_inputs)))
        body = gm.print_readable(print_output=False, include_stride=True, include_device=True)
        self.write(
            "fx_graph.py",
            f"# the torch-level FX graph capture handed the backend\n{header}\n{body}",
        )

    def graph_meta(self, gm: torch.fx.GraphModule, example_inputs: list[Any], options: Any) -> None:
        """What ``python -m torchkiln repro <folder>`` needs besides fx_graph.py: the inputs'
        and attributes' metadata and the compile options a repro keeps."""
        from torchkiln.repro import _options_dict, graph_attributes, value_spec

        try:
            meta = {
                "inputs": [value_spec(v) for v in example_inputs],
                "attributes": graph_attributes(gm),
                "options": _options_dict(options),
            }
            text = json.dumps(meta, indent=1, default=repr)
        except Exception as error:  # noqa: BLE001 - e.g. a graph calling submodules
            text = json.dumps({"unavailable": str(error)})
        self.write("graph_meta.json", text)

    def aten_graph(self, part: str, aten_gm: torch.fx.GraphModule) -> None:
        body = aten_gm.print_readable(print_output=False, include_stride=True, include_device=True)
        self.write(
            f"aten_{part}.py", f"# the ATen {part} graph aot-partition handed the compiler\n{body}"
        )

    def compiled(self, part: str, compiled: Any) -> dict[str, str]:
        """The loop IR, schedule, fusion decisions, wrapper and kernels of a loop-ir
        CompiledGraph; returns {artifact name: path} for the report."""
        paths: dict[str, str] = {}
        graph_ir = getattr(compiled, "graph_ir", None)
        paths[f"{part}.loop_ir"] = self.write(
            f"loop_ir_{part}.txt",
            str(graph_ir) if graph_ir is not None else "(loaded from the graph cache: not lowered)",
        )
        paths[f"{part}.schedule"] = self.write(f"schedule_{part}.txt", compiled.schedule_text())
        paths[f"{part}.fusion"] = self.write(f"fusion_{part}.txt", compiled.fusion_text())
        paths[f"{part}.wrapper"] = self.write(f"wrapper_{part}.py", compiled.wrapper_source or "")
        kernels = list(getattr(compiled, "kernels", ()) or ())
        scheduled = getattr(compiled, "scheduled", None)
        if scheduled is not None:
            paths[f"{part}.costs"] = self.write(
                f"costs_{part}.json", json.dumps(_costs(scheduled, kernels), indent=1)
            )
        for number, kernel in enumerate(kernels):
            name = _safe(str(getattr(kernel, "name", "") or f"kernel{number}"))
            suffix = Path(getattr(kernel, "path", "") or "").suffix or ".txt"
            paths[f"{part}.kernel.{name}"] = self.write(
                f"kernels_{part}/{number:03d}_{name}{suffix}",
                _launch_site_note(kernel, kernels) + str(getattr(kernel, "source", "")),
            )
        return {k: v for k, v in paths.items() if v}

    def guards(self, source: str) -> str:
        return self.write(
            "guards.py", f"# the generated guard check of this graph's capture entry\n{source}"
        )

    def timing(self, report: Any, parts: list[tuple[str, Any]] | None = None) -> str:
        """``report``'s times (phases summed over forward and backward) and, from ``parts``
        ((part, CompiledGraph) pairs), each part's own loop-ir phases."""
        data = {
            "compile_seconds": report.compile_seconds,
            "phases": report.phases,
            "phases_by_part": {
                part: dict(getattr(compiled, "phase_seconds", {}) or {})
                for part, compiled in parts or ()
            },
            "cache": report.cache,
            "kernels": report.kernels,
            "distinct_kernels": report.distinct_kernels,
            "fx_nodes": report.fx_nodes,
            "extern_calls": report.extern_calls,
            "fallbacks": report.fallbacks,
        }
        return self.write("timing.json", json.dumps(data, indent=2))

    def perf_hints(self, hints: list[str]) -> str:
        return self.write("perf_hints.txt", "\n".join(hints) if hints else "(no hints)")

    def failure(self, reason: str) -> str:
        return self.write("failure.txt", reason)


def _costs(scheduled: Any, kernels: list[Any]) -> list[dict[str, Any]]:
    """loop-ir's ``step_costs`` of a schedule, each kernel's record with the function its
    launch site launches (codegen-triton names functions from their text: a profiler shows
    that name), where the backend names one."""
    from torchkiln_loop_ir.costs import step_costs

    functions = {str(getattr(k, "name", "")): getattr(k, "function_name", None) for k in kernels}
    records = step_costs(scheduled)
    for record in records:
        if record["kind"] == "kernel" and functions.get(record["name"]):
            record["function"] = functions[record["name"]]
    return records


def _launch_site_note(kernel: Any, kernels: list[Any]) -> str:
    """A comment heading a dumped kernel whose backend names the function it launches (codegen-
    triton: named from its text, so identical kernels share one): the launch site, the graph
    nodes it computes, and the other launch sites of the same function."""
    function = getattr(kernel, "function_name", None)
    if not function:
        return ""
    path = getattr(kernel, "path", None)
    others = [
        str(getattr(k, "name", ""))
        for k in kernels
        if k is not kernel
        and getattr(k, "function_name", None) == function
        and getattr(k, "path", None) == path
    ]
    nodes = ", ".join(getattr(kernel, "nodes", ()) or ()) or "-"
    shared = (
        f"# the same function is launched by {', '.join(others)} (identical code, compiled once)\n"
        if others
        else ""
    )
    site = getattr(kernel, "name", "")
    return f"# launch site {site} (computes {nodes}) launches {function}\n{shared}"


def write_guards(functions: list[Any], pending: list[tuple[Any, GraphDump]]) -> None:
    """Write ``guards.py`` for each pending (FX graph, dump): the guard check of the capture
    cache entry holding that graph, found among ``functions`` (capture's wrappers: the function,
    its continuations and callees)."""
    by_graph = {}
    for fn in functions:
        for entry in getattr(fn, "entries", ()) or ():
            gm = getattr(entry, "graph_module", None)
            if gm is not None:
                by_graph[id(gm)] = entry
    for gm, dump in pending:
        entry = by_graph.get(id(gm))
        guards = getattr(entry, "guards", None)
        source = getattr(guards, "source", None)
        if source:
            dump.guards(source)
        else:
            dump.write(
                "guards.py",
                "# no capture entry holds this graph (capture failed after "
                "compiling it); no guards",
            )
