"""A compiled graph as plain data, and back: what a persistent cache stores instead of recompiling.

Rebuilding a ``CompiledGraph`` needs the schedule's steps (the wrapper is generated from them and
extern calls are bound from them), the buffer layouts, and the backend's compiled kernels. Kernel
bodies are define-by-run closures that cannot be saved, and the wrapper does not need them once
the kernels are built, so a ``GraphArtifact`` keeps each ``KernelSpec`` with its stages and
buffers dropped, plus what the backend's ``export_kernels`` returns for its kernels (for C++:
the library source and each kernel's entry point). ``load_graph`` hands that back to the
backend's ``load_kernels`` and binds the wrapper: no lowering, no scheduling, no kernel codegen.

A backend without ``export_kernels``/``load_kernels`` cannot be cached: ``export_graph`` raises
``NotCacheable`` (the caller compiles as usual).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .backend import BufferSpec, KernelSpec, ScheduledGraph
from .compile import CompiledGraph
from .options import LoopIROptions


class NotCacheable(Exception):
    """This compiled graph (or its backend) cannot be saved as an artifact; says why."""


@dataclass(frozen=True)
class GraphArtifact:
    """Plain data (picklable, given a pickler that names ATen ops) for one compiled graph."""

    scheduled: ScheduledGraph  # kernel steps without bodies (the wrapper needs names and args)
    backend_name: str
    kernels: Any  # the backend's own export of its compiled kernels
    extern_calls: tuple[str, ...]
    fallbacks: tuple[str, ...]
    constants: tuple[Any, ...] = ()  # lifted tensor constants (on the CPU), passed after the inputs


def _without_bodies(spec: KernelSpec) -> KernelSpec:
    members = tuple(_without_bodies(m) for m in spec.combo)
    return dataclasses.replace(spec, stages=(), buffers={}, combo=members)


def _with_buffers(spec: KernelSpec, buffers: Mapping[str, BufferSpec]) -> KernelSpec:
    """A saved kernel step with the specs of the buffers it passes, from the graph's (a
    code generator reads their dtypes: codegen-triton's loaded kernels raised KeyError, so
    every cache entry of a Triton graph was found corrupt and compiled again)."""
    members = tuple(_with_buffers(m, buffers) for m in spec.combo)
    used = {name: buffers[name] for name in spec.args if name in buffers}
    return dataclasses.replace(spec, buffers=used, combo=members)


def export_graph(compiled: CompiledGraph, backend: Any) -> GraphArtifact:
    """``compiled`` as a ``GraphArtifact``; raises NotCacheable if ``backend`` cannot export."""
    exporter = getattr(backend, "export_kernels", None)
    if exporter is None or getattr(backend, "load_kernels", None) is None:
        raise NotCacheable(f"backend {getattr(backend, 'name', backend)!r} cannot save its kernels")
    scheduled = compiled.scheduled
    steps = tuple(_without_bodies(s) if isinstance(s, KernelSpec) else s for s in scheduled.steps)
    return GraphArtifact(
        scheduled=dataclasses.replace(
            scheduled,
            steps=steps,
            buffers=dict(scheduled.buffers),
            reuse=dict(scheduled.reuse),
            size_symbols=dict(scheduled.size_symbols),
        ),
        backend_name=str(getattr(backend, "name", "")),
        kernels=exporter(compiled.kernels) if compiled.kernels else None,
        constants=tuple(c.detach().cpu() for c in compiled.constants),
        extern_calls=tuple(compiled.extern_calls),
        fallbacks=tuple(compiled.fallbacks),
    )


def load_graph(
    artifact: GraphArtifact, backend: Any, options: LoopIROptions | None = None
) -> CompiledGraph:
    """The ``CompiledGraph`` that ``artifact`` was exported from, rebuilt with ``backend``."""
    from .wrapper import load_wrapper

    if artifact.backend_name != str(getattr(backend, "name", "")):
        raise NotCacheable(
            f"artifact of backend {artifact.backend_name!r}, "
            f"not {getattr(backend, 'name', backend)!r}"
        )
    options = options or LoopIROptions()
    start = time.perf_counter()
    buffers = artifact.scheduled.buffers
    specs = [
        _with_buffers(s, buffers) for s in artifact.scheduled.steps if isinstance(s, KernelSpec)
    ]
    kernels = list(backend.load_kernels(artifact.kernels, specs)) if specs else []
    if len(kernels) != len(specs):
        raise NotCacheable(f"the backend loaded {len(kernels)} kernels for {len(specs)} steps")
    call, source, path = load_wrapper(artifact.scheduled, kernels, options.cache_dir)
    return CompiledGraph(
        graph_ir=None,  # not lowered: that is the point
        scheduled=artifact.scheduled,
        kernels=kernels,
        wrapper_source=source,
        source_path=path,
        _call=call,
        phase_seconds={"cache_load": time.perf_counter() - start},
        saved_extern_calls=artifact.extern_calls,
        saved_fallbacks=artifact.fallbacks,
        constants=tuple(
            c.to(artifact.scheduled.buffers[name].device)
            for c, name in zip(
                artifact.constants, artifact.scheduled.inputs[-len(artifact.constants) :]
            )
        )
        if artifact.constants
        else (),
    )
