"""The backend function B of contract C5: aot-partition -> loop-ir -> a code generator by device.

``make_backend(options, recorder)`` returns a torch.compile-style backend
``(gm, example_inputs) -> callable``. Each graph is recorded as a ``GraphReport``. Any failure,
while compiling or on a later call of the compiled graph, makes that graph run eagerly
(``gm.forward``) with one warning, unless ``options.strict`` is set, in which case it raises
``BackendCompilerFailed``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torchkiln_aot_partition
import torchkiln_loop_ir

from torchkiln import graph_cache
from torchkiln.cudagraph_steps import wrap_step_graph
from torchkiln.cudagraphs import wrap_cudagraphs
from torchkiln.ddp_buckets import active_bucket_cap, split_at_buckets
from torchkiln.debug_dir import GraphDump, debug_root
from torchkiln.errors import BackendCompilerFailed, FailedAfterEffects, LayerUnavailable
from torchkiln.gc_freeze import frozen_heap
from torchkiln.logs import log_aot_graph, log_compiled_stages, log_output_code, log_perf_hints
from torchkiln.options import CompileOptions
from torchkiln.perf_hints import perf_hints
from torchkiln.report import EagerFallback, GraphReport, ReportRecorder

Backend = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


def _layer(module: Any, name: str) -> Any:
    """``module.name``, or a LayerUnavailable saying which contract is missing."""
    try:
        return getattr(module, name)
    except AttributeError:
        raise LayerUnavailable(f"{module.__name__} does not provide {name} yet") from None


def graph_device(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.device:
    """The device the graph runs on: that of its first tensor input, else of its parameters."""
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            return value.device
    for tensor in [*gm.parameters(), *gm.buffers()]:
        return tensor.device
    return torch.device("cpu")


def _codegen_options(module: Any, class_name: str, given: Any, options: CompileOptions) -> Any:
    """``given`` if the user passed a code generator options object; else the generator's own
    options class holding the CompileOptions knobs it declares (cache_dir, autotune) and the
    fields ``given`` holds as a tuple of items (a dict in CompileOptions); else None (its
    defaults)."""
    if given is not None and not isinstance(given, tuple):
        return given
    knobs = {"cache_dir": options.cache_dir, "autotune": options.autotune or None}
    knobs = {k: v for k, v in knobs.items() if v is not None}
    cls = getattr(module, class_name, None)
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    declared = {f.name for f in dataclasses.fields(cls)}
    kept = {k: v for k, v in knobs.items() if k in declared} | dict(given or ())
    return cls(**kept) if kept else None


def code_generator(device: torch.device, options: CompileOptions) -> Any:
    """The code generator for ``device``: CppBackend on CPU, TritonBackend on CUDA.

    ``options.codegen`` overrides the choice: "triton" on CPU tensors runs Triton's interpreter
    (TRITON_INTERPRET=1), which is how CI tests the Triton path without a GPU.
    """
    chosen = options.codegen if options.codegen != "auto" else device.type
    if chosen in ("cpu", "cpp"):
        import torchkiln_codegen_cpp as cpp

        return _layer(cpp, "CppBackend")(
            options=_codegen_options(cpp, "CppOptions", options.cpp_options, options)
        )
    if chosen in ("cuda", "triton"):
        try:
            import torchkiln_codegen_triton as triton
        except ImportError as error:  # a CPU-only install: torchkiln without its triton extra
            raise LayerUnavailable(
                f"compiling for {device.type} with Triton needs the Triton code generator: "
                f"pip install 'torchkiln[triton]' ({one_line(error)})"
            ) from error

        return _layer(triton, "TritonBackend")(
            options=_codegen_options(triton, "TritonOptions", options.triton_options, options)
        )
    raise LayerUnavailable(
        f"no code generator for device {device.type!r} (cpu and cuda are supported)"
    )


def loop_ir_options(options: CompileOptions) -> Any:
    """A ``LoopIROptions`` with the knobs of ``options`` that it declares (others ignored) and
    its ``loop_ir`` fields (``CompileOptions`` checked those against the installed
    ``LoopIROptions`` when it was made: ``options.check_fields``)."""
    cls = _layer(torchkiln_loop_ir, "LoopIROptions")
    wanted = {
        "max_fusions": options.max_fusions,
        "cache_dir": options.cache_dir,
        "fallback_random": options.fallback_random,
        **dict(options.loop_ir),
    }
    declared = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return cls(**{k: v for k, v in wanted.items() if k in declared and v is not None})


def one_line(error: BaseException, limit: int = 200) -> str:
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _summary(
    index: int,
    fx_nodes: int,
    seconds: float,
    graphs: list[Any],
    device: torch.device,
    cudagraphs: str,
    timers: dict[str, float] | None = None,
    cache: str = "",
    artifacts: dict[str, str] | None = None,
    hints: list[str] | None = None,
    saved_bytes: int | None = None,
    attention: list[str] | None = None,
) -> GraphReport:
    phases = dict(timers or {})
    for g in graphs:
        for name, value in getattr(g, "phase_seconds", {}).items():
            phases[name] = phases.get(name, 0.0) + value
    part_kernels: dict[str, int] = {}
    part_fallbacks: dict[str, list[str]] = {}
    for number, g in enumerate(graphs):
        # the first graph is the forward; the others are the backward (and its variants)
        part = PARTS[min(number, 1)]
        part_kernels[part] = part_kernels.get(part, 0) + _num_kernels(g)
        part_fallbacks.setdefault(part, []).extend(str(op) for op in getattr(g, "fallbacks", ()))
    return GraphReport(
        index=index,
        fx_nodes=fx_nodes,
        kernels=sum(part_kernels.values()),
        distinct_kernels=distinct_kernels(graphs),
        extern_calls=[str(op) for g in graphs for op in getattr(g, "extern_calls", ())],
        fallbacks=[op for ops in part_fallbacks.values() for op in ops],
        compile_seconds=seconds,
        source_path=str(getattr(graphs[0], "source_path", "") or "") if graphs else "",
        device=str(device),
        cudagraphs=cudagraphs,
        phases=phases,
        cache=cache,
        artifacts=dict(artifacts or {}),
        perf_hints=list(hints or []),
        convolutions=[line for g in graphs for line in getattr(g, "convolution_log", ())],
        linears=[line for g in graphs for line in getattr(g, "linear_log", ())],
        part_kernels=part_kernels,
        part_fallbacks=part_fallbacks,
        saved_activation_bytes=saved_bytes,
        attention=list(attention or []),
    )


def distinct_kernels(graphs: list[Any]) -> int:
    """Distinct kernel functions of ``graphs``' kernels: one per (file, function name) where a
    kernel says which function it launches (``function_name``, codegen-triton's: launch sites of
    identical code share one), else one per kernel."""
    keys = set()
    for g in graphs:
        for k in getattr(g, "kernels", ()) or ():
            function = getattr(k, "function_name", None)
            keys.add((getattr(k, "path", None), function) if function else id(k))
    return len(keys)


def _num_kernels(graph: Any) -> int:
    return int(getattr(graph, "num_kernels", len(getattr(graph, "kernels", ()))))


def saved_activation_bytes(runtime: Any, example_inputs: Sequence[Any]) -> int | None:
    """What a training runtime's forward saves for its backward beyond the caller's tensors, for
    these inputs (aot-partition's figure); None for an inference runtime, or when this
    aot-partition cannot say (an older release, a runtime it did not make)."""
    reader = getattr(torchkiln_aot_partition, "saved_activation_bytes", None)
    if reader is None:
        return None
    try:
        return reader(runtime, list(example_inputs))
    except Exception:  # noqa: BLE001 - a figure for the report never fails a compile
        return None


def code_artifacts(part: str, compiled: Any) -> dict[str, str]:
    """Where a compiled ATen graph's code lives: its wrapper and each kernel with a file."""
    out = {}
    if getattr(compiled, "source_path", ""):
        out[f"{part}.wrapper"] = str(compiled.source_path)
    for number, kernel in enumerate(getattr(compiled, "kernels", ()) or ()):
        path = getattr(kernel, "path", None)
        if path:
            out[f"{part}.kernel.{getattr(kernel, 'name', '') or number}"] = str(path)
    return out


PARTS = ("forward", "backward")


class _CacheSlot:
    """One graph's dealings with the persistent graph cache: its key, the verdict for the
    report, and the store once every graph of the runtime is compiled (for training, that is
    after the backward graph compiled at the first backward call)."""

    def __init__(
        self, options: CompileOptions, codegen: Any, ir_options: Any, timers: dict[str, float]
    ) -> None:
        self.options, self.codegen, self.ir_options = options, codegen, ir_options
        self.timers = timers
        self.key: str | None = None
        self.root = graph_cache.cache_root(options)
        self.verdict = "off: disabled by CompileOptions(graph_cache=False)"
        self.metadata: Any = None

    def lookup(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        compiled_graphs: list[Any],
        wrap_training: Callable[[Any, str, int], Any] | None = None,
    ) -> Any:
        """The runtime rebuilt from a cache entry, or None (verdict says why). A training entry's
        graphs, and an inference entry's that writes its inputs, go through
        ``wrap_training(graph, part, saved)`` first (CUDA graphs, cudagraph_steps.py)."""
        start = time.perf_counter()
        try:
            self.key = graph_cache.graph_key(
                gm, example_inputs, self.options, self.codegen, self.ir_options
            )
        except graph_cache.NotCached as reason:
            self.verdict = f"off: {reason}"
            return None
        except Exception as error:  # noqa: BLE001 - a key we cannot make means no caching
            self.verdict = f"off: no key ({one_line(error)})"
            return None
        finally:
            self.timers["cache_key"] = time.perf_counter() - start
        try:
            entry = graph_cache.load(self.root, self.key)
            if entry is None:
                self.verdict = "miss"
                return None
            fw = torchkiln_loop_ir.load_graph(entry.forward, self.codegen, self.ir_options)
            bw = (
                torchkiln_loop_ir.load_graph(entry.backward, self.codegen, self.ir_options)
                if entry.backward is not None
                else None
            )
            run_fw, run_bw = fw, bw
            if wrap_training is not None and entry.runtime.training and bw is not None:
                run_fw = wrap_training(fw, "forward", entry.runtime.num_saved)
                run_bw = wrap_training(bw, "backward", 0)
            elif wrap_training is not None and entry.runtime.mutated_inputs:
                run_fw = wrap_training(fw, "inference", 0)
            runtime = torchkiln_aot_partition.rebuild_runtime(gm, entry.runtime, run_fw, run_bw)
        except Exception as error:  # noqa: BLE001 - a bad entry is compiled again, never fatal
            self.verdict = f"corrupt: {one_line(error)}"
            return None
        compiled_graphs.extend(g for g in (fw, bw) if g is not None)
        self.verdict = "hit"
        return runtime

    def remember(self, runtime: Any) -> None:
        """Take the metadata of the runtime aot_compile made (before any CUDA graph wrapping)."""
        if self.key is not None:
            try:
                self.metadata = torchkiln_aot_partition.runtime_metadata(runtime)
            except Exception as error:  # noqa: BLE001
                self.verdict += f" (not stored: {one_line(error)})"

    def forgo(self, reason: str) -> None:
        """Store nothing for this graph (``reason`` goes to the verdict)."""
        if self.key is not None and self.metadata is not None:
            self.verdict += f" (not stored: {reason})"
        self.metadata = None

    def store_if_complete(self, compiled_graphs: list[Any]) -> None:
        if self.key is None or self.metadata is None:
            return
        wanted = 2 if self.metadata.training else 1
        if len(compiled_graphs) != wanted:
            return
        start = time.perf_counter()
        try:
            artifacts = [torchkiln_loop_ir.export_graph(g, self.codegen) for g in compiled_graphs]
            graph_cache.store(
                self.root,
                graph_cache.CacheEntry(
                    graph_cache.FORMAT,
                    self.key,
                    self.metadata,
                    artifacts[0],
                    artifacts[1] if self.metadata.training else None,
                ),
            )
        except Exception as error:  # noqa: BLE001 - not caching never breaks compiling
            self.verdict += f" (not stored: {one_line(error)})"
        self.metadata = None  # stored once
        self.timers["cache_store"] = time.perf_counter() - start


def at_traced_strides(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """``gm`` called with each input tensor at the strides it was traced with (its placeholder's
    meta value), copied where they differ on a dim of size above one. A backward graph that
    runs op by op after its compile failed gets the forward's saved values as the compiled
    forward returned them (channels-last, where loop-ir laid them out so), and its ATen ops
    (an ``as_strided`` above all) were traced for the other strides."""
    traced = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]

    def restrided(arg: Any, val: Any) -> Any:
        if not (isinstance(arg, torch.Tensor) and isinstance(val, torch.Tensor)):
            return arg
        shape, stride = tuple(val.shape), tuple(val.stride())
        if not all(isinstance(v, int) for v in (*shape, *stride)) or tuple(arg.shape) != shape:
            return arg
        if all(n == 1 or a == b for n, a, b in zip(shape, arg.stride(), stride)):
            return arg
        return torch.empty_strided(shape, stride, dtype=arg.dtype, device=arg.device).copy_(arg)

    def run(*args: Any) -> Any:
        return gm(*[restrided(a, v) for a, v in zip(args, traced)])

    return run


def make_backend(
    options: CompileOptions, recorder: ReportRecorder | None = None, function: str = "graph"
) -> Backend:
    """The torchkiln backend (C5) for ``options``, recording into ``recorder`` (or a new one).
    ``function`` names the debug-dir and repro folders of its graphs (``<function>_<n>``)."""
    recorder = recorder if recorder is not None else ReportRecorder()
    root = debug_root(options.debug_dir)

    def torchkiln_backend(
        gm: torch.fx.GraphModule, example_inputs: list[Any]
    ) -> Callable[..., Any]:
        with frozen_heap():
            return _torchkiln_backend(gm, example_inputs)

    def _torchkiln_backend(
        gm: torch.fx.GraphModule, example_inputs: list[Any]
    ) -> Callable[..., Any]:
        cap = active_bucket_cap() if options.ddp_buckets else None
        if cap is not None:
            try:
                split = split_at_buckets(gm, cap, compile_whole)
            except Exception as error:  # the whole graph still compiles (re-raised when strict)
                if options.strict:
                    raise BackendCompilerFailed(
                        f"torchkiln: splitting a graph at DDP buckets failed: {one_line(error)}"
                    ) from error
                warnings.warn(
                    f"torchkiln: splitting a graph at DDP buckets failed ({one_line(error)}); "
                    "compiling it whole",
                    stacklevel=2,
                )
                split = None
            if split is not None:
                recorder.add_bucket_split(split[1].describe())
                return split[0]
        return compile_whole(gm, example_inputs)

    def compile_whole(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        index = recorder.new_index()
        fx_nodes = len(gm.graph.nodes)
        compiled_graphs: list[Any] = []
        reported: list[GraphReport] = []
        timers: dict[str, float] = {}
        artifacts: dict[str, str] = {}
        start = time.perf_counter()
        dump = GraphDump.create(root, function, index) if root is not None else None
        if dump is not None:
            artifacts["debug_dir"] = str(dump.folder)
            dump.fx_graph(gm, list(example_inputs))
            dump.graph_meta(gm, list(example_inputs), options)
            recorder.add_dump(gm, dump)
        stage = "setup"

        def record_stages(part: str, compiled: Any) -> None:
            """Log and dump what the stages made for ``part``; note where its code lives."""
            artifacts.update(code_artifacts(part, compiled))
            log_output_code(index, part, compiled)
            log_compiled_stages(index, part, compiled)
            if dump is not None:
                dump.compiled(part, compiled)

        logged_hints: set[str] = set()
        saved_bytes: list[int | None] = [None]  # the partition's figure, once it is known
        attention_lines: list[str] = []  # hand-written attention routed or not (attention.py)

        def summarize(seconds: float, cudagraphs: str, verdict: str) -> GraphReport:
            hints = perf_hints(list(zip(PARTS, compiled_graphs)), cudagraphs)
            summary = _summary(
                index,
                fx_nodes,
                seconds,
                compiled_graphs,
                device,
                cudagraphs,
                timers,
                verdict,
                artifacts,
                hints,
                saved_bytes[0],
                [*gm.meta.get("sdpa_masks", ()), *attention_lines],
            )
            # summarized again when the backward compiles: log only what that added
            log_perf_hints(index, [h for h in hints if h not in logged_hints])
            logged_hints.update(hints)
            if dump is not None:
                dump.timing(summary, list(zip(PARTS, compiled_graphs)))
                dump.perf_hints(hints)
            return summary

        try:
            device = graph_device(gm, example_inputs)
            codegen = code_generator(device, options)
            ir_options = loop_ir_options(options)
            compile_graph = _layer(torchkiln_loop_ir, "compile_graph")
            aot_compile = _layer(torchkiln_aot_partition, "aot_compile")
            slot = _CacheSlot(options, codegen, ir_options, timers)
            in_compiler = [0.0]
            step_graphs: list[tuple[str, str]] = []  # (part, CUDA-graph status) of training graphs

            def fw_compiler(aten_gm: torch.fx.GraphModule, aten_inputs: list[Any]) -> Any:
                with frozen_heap():  # the backward compiles later, at the first backward
                    if not compiled_graphs:  # the forward: a failure falls back below
                        return _fw_compiler(aten_gm, aten_inputs)
                    try:
                        return _fw_compiler(aten_gm, aten_inputs)
                    except Exception as error:  # noqa: BLE001 - the backward falls back (C5)
                        return _backward_as_aten(aten_gm, error)

            def _backward_as_aten(aten_gm: torch.fx.GraphModule, error: Exception) -> Any:
                """A backward graph that failed to compile, at the first backward (the forward
                ran already, so the graph cannot run eagerly as a whole any more): its ATen
                graph runs op by op, a counted fallback with a one-line warning."""
                reason = (
                    f"compiling the backward failed on graph {index} ({fx_nodes} FX nodes): "
                    f"{one_line(error)}"
                )
                if options.strict:
                    raise BackendCompilerFailed(f"torchkiln: {reason} (strict mode)") from error
                warnings.warn(f"torchkiln: {reason}; running its ATen graph", stacklevel=3)
                recorder.add_fallback(EagerFallback(index, fx_nodes, reason))
                return at_traced_strides(aten_gm)

            def _fw_compiler(aten_gm: torch.fx.GraphModule, aten_inputs: list[Any]) -> Any:
                part = PARTS[min(len(compiled_graphs), 1)]
                routed = aten_gm.meta.get("attention")
                attention_lines.extend(getattr(routed, "fused", ()))
                attention_lines.extend(getattr(routed, "refused", ()))
                log_aot_graph(index, part, aten_gm)
                if dump is not None:
                    dump.aten_graph(part, aten_gm)
                began = time.perf_counter()
                compiled = compile_graph(aten_gm, aten_inputs, backend=codegen, options=ir_options)
                compiled_graphs.append(compiled)
                record_stages(part, compiled)
                in_compiler[0] += time.perf_counter() - began
                if "absent_tangents" in aten_gm.meta:
                    # a backward specialised on None tangents cannot stand in for the full one a
                    # cache entry holds (it takes fewer inputs, returns fewer gradients)
                    slot.forgo("a backward specialised on unused outputs")
                slot.store_if_complete(compiled_graphs)
                if options.cudagraphs and (part == "backward" or "num_saved" in aten_gm.meta):
                    # a training graph: its forward and backward are recorded apart
                    compiled, status = wrap_step_graph(
                        compiled, part, int(aten_gm.meta.get("num_saved", 0)), aten_inputs
                    )
                    step_graphs.append((part, status))
                elif options.cudagraphs and aten_gm.meta.get("mutated_inputs"):
                    # an inference graph that writes its inputs (a buffer, a cache, an argument):
                    # recorded inside the runtime, which writes the caller's tensors
                    # (cudagraphs.py's whole-call recording would write them in its warm-up)
                    compiled, status = wrap_step_graph(compiled, "inference", 0, aten_inputs)
                    step_graphs.append(("inference", status))
                if reported:  # a backward graph compiled lazily, after the report was written
                    reported[0] = summarize(
                        reported[0].compile_seconds, _step_status(step_graphs), slot.verdict
                    )
                    recorder.replace_graph(index, reported[0])
                return compiled

            stage = "graph cache"
            compiled = None
            if options.graph_cache and dump is not None:
                # a cache entry has no ATen graphs or loop IR to dump: compile every stage
                slot.verdict = "off: not read while a debug dir is written"
            elif options.graph_cache:
                wrap = None
                if options.cudagraphs:

                    def wrap(graph: Any, part: str, saved: int) -> Any:
                        wrapped, status = wrap_step_graph(graph, part, saved, example_inputs)
                        step_graphs.append((part, status))
                        return wrapped

                compiled = slot.lookup(gm, list(example_inputs), compiled_graphs, wrap)
                if compiled is None:
                    step_graphs.clear()  # a bad entry's wrapped graphs: compiled again below
                for part, loaded in zip(PARTS, compiled_graphs):
                    record_stages(part, loaded)
            if compiled is None:
                stage = "aot/loop-ir/codegen"
                decompositions = _layer(torchkiln_loop_ir, "decompositions")()
                began = time.perf_counter()
                # the keyword only when turned off: older aot-partition releases lack it
                extra = {} if options.freeze_parameters else {"freeze_parameters": False}
                if not options.sdpa_attention:
                    extra["sdpa_attention"] = False
                compiled = aot_compile(
                    gm,
                    example_inputs,
                    fw_compiler=fw_compiler,
                    decompositions=decompositions,
                    **extra,
                )
                timers["aot"] = time.perf_counter() - began - in_compiler[0]
                slot.remember(compiled)
                slot.store_if_complete(compiled_graphs)
            saved_bytes[0] = saved_activation_bytes(compiled, example_inputs)
            cudagraphs = ""
            if options.cudagraphs and step_graphs:
                cudagraphs = _step_status(step_graphs)
            elif options.cudagraphs:
                compiled, cudagraphs = wrap_cudagraphs(compiled, gm, example_inputs)
        except Exception as error:  # noqa: BLE001 - any internal failure falls back (C5)
            where = _Where(function, index, fx_nodes, dump)
            return _fall_back(gm, where, stage, error, options, recorder, list(example_inputs))
        reported.append(summarize(time.perf_counter() - start, cudagraphs, slot.verdict))
        recorder.add_graph(reported[0])
        return _guard_calls(
            compiled, gm, _Where(function, index, fx_nodes, dump), options, recorder
        )

    torchkiln_backend.recorder = recorder  # type: ignore[attr-defined]
    return torchkiln_backend


def _step_status(step_graphs: list[tuple[str, str]]) -> str:
    """A training graph's CUDA-graph status from its parts': "on" when each part recorded is, else
    the parts' own ("forward on; backward skipped: ...")."""
    if all(status == "on" for _, status in step_graphs):
        return "on"
    return "; ".join(f"{part} {status}" for part, status in step_graphs)


@dataclasses.dataclass(frozen=True)
class _Where:
    """Which graph a fallback is about: the compiled function's name, the graph's index, its
    size, and its debug-dir folder (None without a debug dir)."""

    function: str
    index: int
    fx_nodes: int
    dump: GraphDump | None


def _write_repro(
    gm: torch.fx.GraphModule,
    where: _Where,
    reason: str,
    options: CompileOptions,
    inputs: list[Any],
) -> str:
    """Write ``repro.py`` (and ``failure.txt``) for a graph that fell back: into its debug-dir
    folder, else ``<cache root>/repro/<function>_<n>/``. Returns the script's path, or "" when
    it could not be written (a repro never makes matters worse)."""
    from torchkiln.repro import repro_source

    try:
        dump = where.dump
        if dump is None:
            dump = GraphDump.create(
                graph_cache.cache_root(options).parent / "repro", where.function, where.index
            )
        if dump is None:
            return ""
        dump.failure(reason)
        source = repro_source(gm, inputs, options, reason, f"{where.function} graph {where.index}")
        return dump.write("repro.py", source)
    except Exception as error:  # noqa: BLE001 - the fallback itself must still happen
        warnings.warn(f"torchkiln: could not write a repro: {one_line(error)}", stacklevel=3)
        return ""


def _fall_back(
    gm: torch.fx.GraphModule,
    where: _Where,
    stage: str,
    error: Exception,
    options: CompileOptions,
    recorder: ReportRecorder,
    inputs: list[Any],
) -> Callable[..., Any]:
    reason = f"{stage} failed on graph {where.index} ({where.fx_nodes} FX nodes): {one_line(error)}"
    repro = _write_repro(gm, where, reason, options, inputs) if options.repro else ""
    see = f" (repro: python {repro})" if repro else ""
    if options.strict:
        raise BackendCompilerFailed(f"torchkiln: {reason} (strict mode){see}") from error
    warnings.warn(f"torchkiln: {reason}; running this graph eagerly{see}", stacklevel=2)
    recorder.add_fallback(EagerFallback(where.index, where.fx_nodes, reason, repro))
    return gm.forward


def _guard_calls(
    compiled: Callable[..., Any],
    gm: torch.fx.GraphModule,
    where: _Where,
    options: CompileOptions,
    recorder: ReportRecorder,
) -> Callable[..., Any]:
    """``compiled``, checked against eager when a call of it raises (non-strict).

    A compiled graph has no effect until it writes its input mutations back, all at once, at the
    end (aot-partition's runtime), or a kernel writes one in place (loop-ir's in_place.py: the
    runtime turns a failure after that into MutationAppliedError too). So when it raises before
    that, the graph alone runs eagerly: if
    eager raises too, that was the user's error (an index out of range): eager's exception
    propagates, unchanged, and the compiled graph stays in use. If eager succeeds, the compiled
    graph was wrong to raise: this graph runs eagerly from now on, with one warning. When it
    raises after writing back (MutationAppliedError), it is never re-run: FailedAfterEffects
    says so, and later calls run eagerly.
    """
    if options.strict:
        return compiled
    applied_error = getattr(torchkiln_aot_partition, "MutationAppliedError", ())
    run = compiled
    # bound once: ``gm.forward`` is a new bound-method object on every access, so ``run is
    # gm.forward`` never held and a user error after a fallback ran the eager graph twice
    eager = gm.forward

    def run_graph(*args: Any) -> Any:
        nonlocal run
        if run is eager:
            return run(*args)
        try:
            return run(*args)
        except applied_error as error:
            run = eager
            _fall_back(
                gm, where, "running the compiled graph", error, options, recorder, list(args)
            )
            raise FailedAfterEffects(
                f"torchkiln: graph {where.index} failed after writing its input mutations back "
                f"({one_line(error)}); it is not re-run eagerly (that would apply them twice)"
            ) from error
        except Exception as error:  # noqa: BLE001 - decided below, against eager
            failed = error
        # Outside the except block: eager's own exception must not carry the compiled one as
        # its __context__.
        result = eager(*args)  # raises the user's error as eager does
        run = eager
        _fall_back(gm, where, "running the compiled graph", failed, options, recorder, list(args))
        return result

    return run_graph
