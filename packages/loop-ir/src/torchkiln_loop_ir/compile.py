"""``compile_graph`` (contract C3): lower -> schedule -> backend.compile_kernels -> wrapper."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .backend import (
    Backend,
    BackendCapabilities,
    BufferSpec,
    ExternCall,
    KernelSpec,
    ScheduledGraph,
    target_programs,
)
from .combos import combine_kernels
from .graph import lower
from .in_place import in_place_writes, requested_in_place
from .ir import Buffer, ComputedBuffer, ExternKernel, GraphIR, NamedView
from .kernels import steps_for
from .matmul_templates import Chooser, fuse_matmul_epilogues
from .memory import eliminate_dead_code, plan_memory
from .merge_dims import merge_dims
from .mixed_order import mix_orders
from .options import LoopIROptions
from .printing import format_scheduled_graph
from .scheduler import Scheduler


def _buffer_specs(graph: GraphIR, nodes: Sequence[Any] = ()) -> dict[str, BufferSpec]:
    """Every buffer's spec; ``nodes`` (the scheduled ones) override the graph's nodes of the
    same name (a partial ``mix_orders`` laid out anew)."""
    specs: dict[str, BufferSpec] = {}

    def add(name, lay, offset=0):
        specs[name] = BufferSpec(
            name, lay.dtype, lay.device, tuple(lay.size), tuple(lay.stride), lay.offset
        )

    for b in graph.inputs:
        add(b.name, b.layout)
    for n in (*graph.nodes, *nodes):
        if isinstance(n, ComputedBuffer):
            add(n.name, n.layout)
        elif isinstance(n, ExternKernel):
            for out in n.outputs:
                if out is not None:
                    add(out.name, out.layout)
        elif isinstance(n, NamedView):
            add(n.name, n.view.layout)
    return specs


def schedule(
    graph: GraphIR,
    capabilities: BackendCapabilities,
    options: LoopIROptions | None = None,
    choose_template: Chooser | None = None,
) -> ScheduledGraph:
    """Fuse the realized nodes of ``graph`` into kernels and plan its buffers;
    ``choose_template``: the backend's timing of matmul templates (``matmul_templates.py``)."""
    options = options or LoopIROptions()
    outputs = {o.name for o in graph.outputs if isinstance(o, (Buffer, NamedView))}
    outputs |= set(graph.kept)  # computed for their checks, never returned
    nodes = eliminate_dead_code(graph.nodes, outputs)
    if options.mixed_order_reductions:
        device = next((n.layout.device for n in nodes if isinstance(n, ComputedBuffer)), None)
        programs = target_programs(options.split_programs, capabilities, device)
        computed = options.mixed_order_reductions != "loaded"
        nodes = mix_orders(
            nodes,
            capabilities.mixed_order_rnumel,
            programs,
            computed,
            options.mixed_order_narrow_programs,
        )
    sched = Scheduler(nodes, capabilities, outputs)
    sched.fuse(options.max_fusions)
    plans = {}
    for g in sched.groups:
        if not g.is_extern:
            plan = sched.plan(g.nodes)
            assert plan is not None and not hasattr(plan, "ok"), plan
            plans[id(g)] = merge_dims(plan) if capabilities.merge_dims else plan
    buffers = _buffer_specs(graph, nodes)
    steps = steps_for(sched.groups, plans, buffers, outputs)
    template_log: tuple[str, ...] = ()
    if capabilities.matmul_templates and options.matmul_templates != "never":
        mutated = {name for _, name in graph.in_place}
        steps, template_log = fuse_matmul_epilogues(
            steps, buffers, outputs, options.matmul_templates, choose_template, mutated
        )
    if capabilities.combo_kernels > 1 and (
        options.combo_kernels == "always"
        or (
            options.combo_kernels == "auto"
            and any(b.device.type == "cuda" for b in buffers.values())
        )
    ):
        alive = outputs | {b.name for b in graph.inputs} | set(graph.input_names or ())
        steps = combine_kernels(steps, buffers, capabilities.combo_kernels, alive=alive)
    input_names = graph.input_names or [b.name for b in graph.inputs]
    steps, reuse = plan_memory(steps, buffers, input_names, outputs, options.reuse_buffers)
    reuse.update(in_place_writes(steps, buffers, graph))  # mutated inputs written in place
    out_names = tuple(o.name if isinstance(o, (Buffer, NamedView)) else o for o in graph.outputs)
    return ScheduledGraph(
        tuple(input_names),
        dict(graph.size_symbols),
        buffers,
        tuple(steps),
        out_names,
        reuse,
        tuple(sched.decisions),
        template_log,
    )


@dataclass
class CompiledGraph:
    """A compiled ATen graph: ``cg(*inputs) -> list[Tensor]``."""

    graph_ir: GraphIR | None  # None for a graph loaded from a cache entry (see saved_*)
    scheduled: ScheduledGraph
    kernels: list[Any]
    wrapper_source: str
    source_path: str
    _call: Any = field(repr=False, default=None)
    # seconds per phase ("lowering", "scheduling", "codegen", "wrapper"; "cache_load" when it came
    # from a cache entry), so the meta-package can say where compile time went
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # a graph loaded from a cache entry has no GraphIR; its extern calls and fallbacks were saved
    saved_extern_calls: tuple[str, ...] | None = None
    saved_fallbacks: tuple[str, ...] | None = None
    constants: tuple[torch.Tensor, ...] = ()  # lifted tensor constants, passed after the inputs
    # one line per convolution: oneDNN with the activation fused, or why not (mkldnn.py)
    convolution_log: tuple[str, ...] = ()
    # one line per linear layer: oneDNN with its epilogue fused and the timings, or why not
    # (mkldnn_linear.py)
    linear_log: tuple[str, ...] = ()

    def __call__(self, *inputs: Any) -> list[torch.Tensor]:
        return self._call((*inputs, *self.constants) if self.constants else inputs)

    def call_boxed(self, inputs: list[Any]) -> list[torch.Tensor]:
        """Call with a list the caller gives away: the wrapper empties it, so each input whose
        last reference it was is freed at its last use in the graph, not after the call."""
        inputs.extend(self.constants)
        return self._call(inputs)

    @property
    def num_kernels(self) -> int:
        return len(self.kernels)

    @property
    def extern_calls(self) -> list[str]:
        if self.saved_extern_calls is not None:
            return list(self.saved_extern_calls)
        assert self.graph_ir is not None  # a graph loaded from a cache entry saved its calls
        return [str(op) for op in self.graph_ir.extern_calls]

    @property
    def fallbacks(self) -> list[str]:
        if self.saved_fallbacks is not None:
            return list(self.saved_fallbacks)
        assert self.graph_ir is not None  # a graph loaded from a cache entry saved its fallbacks
        return [str(op) for op in self.graph_ir.fallbacks]

    @property
    def kernel_specs(self) -> list[KernelSpec]:
        return [s for s in self.scheduled.steps if isinstance(s, KernelSpec)]

    @property
    def extern_steps(self) -> list[ExternCall]:
        return [s for s in self.scheduled.steps if isinstance(s, ExternCall)]

    def schedule_text(self) -> str:
        """The schedule as readable text (kernels, their stages and bodies, externs, frees)."""
        return format_scheduled_graph(self.scheduled)

    def fusion_text(self) -> str:
        """Every fusion decision of the scheduler, one a line: accepted ones and rejected ones
        with the reason (``scheduler.FusionRecord``)."""
        records = getattr(self.scheduled, "fusion_log", ())
        return "\n".join(map(str, records)) if records else "(no fusion candidates)"


def compile_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    backend: Backend,
    options: LoopIROptions | None = None,
) -> CompiledGraph:
    """Compile an ATen graph (contract C2's ``aten_gm``) with ``backend`` (contract C3)."""
    from .wrapper import load_wrapper

    options = options or LoopIROptions()
    phases: dict[str, float] = {}
    start = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal start
        now = time.perf_counter()
        phases[name] = now - start
        start = now

    # contract C2: how many leading outputs go to the user as they are (any strides will do)
    free_outputs = int(gm.meta.get("free_output_strides", 0))
    inference_meta = "free_output_strides" in gm.meta
    # contract C2 for training: a forward's last outputs are saved for its backward, which reads
    # the leading inputs as the forward returned them (their strides, not the traced ones)
    free_saved = int(gm.meta.get("free_saved_strides", 0))
    saved_inputs = int(gm.meta.get("saved_inputs", 0))
    training_meta = "free_saved_strides" in gm.meta or "saved_inputs" in gm.meta
    in_place = requested_in_place(gm, backend)  # contract C2: mutated inputs it may write in place
    convolution_log: tuple[str, ...] = ()
    if saved_inputs:
        from .channels_last import adopt_input_strides

        gm, convolution_log = adopt_input_strides(gm, list(example_inputs), saved_inputs)
    gm, example_inputs, constants = lift_constants(gm, example_inputs)
    # oneDNN's channels-last convolutions pay in inference (prepacked weights, fused
    # activations); in a training step each saved activation went back to the traced NCHW
    # strides through a transposing copy, and the weights were reordered again every step
    # (conv suite at batch 32 on the CPU, session 31: the step 0.66x eager's speed with them,
    # 1.17x without)
    if (
        options.mkldnn_convolution
        and getattr(backend, "device_type", None) == "cpu"
        and not training_meta
    ):
        from .mkldnn import use_mkldnn_convolutions

        gm, more = use_mkldnn_convolutions(gm)
        convolution_log += more
    linear_log: tuple[str, ...] = ()
    # a grouped GEMM's concatenated weight is kept while its sources are unchanged: in a
    # training step the optimizer changes them every step, so it was concatenated (and, for
    # oneDNN, prepacked) again on every call (CPU, small Llama at batch 32, session 32: the
    # forward 15.4 ms grouped, 8.7 ms not)
    if options.group_linears and getattr(backend, "device_type", None) == "cpu":
        if training_meta:
            linear_log = (
                "linears not grouped: a training step's optimizer changes the weights every "
                "step, so their concatenation would be rebuilt on every call",
            )
        else:
            from .linear_group import group_linears

            gm, linear_log = group_linears(gm, options.mkldnn_linear)
    if options.mkldnn_linear != "never" and getattr(backend, "device_type", None) == "cpu":
        from .mkldnn_linear import use_mkldnn_linears

        gm, more = use_mkldnn_linears(gm, options.mkldnn_linear, pack=not training_meta)
        linear_log += more
    device_type = getattr(backend, "device_type", None)
    generated = options.generated_conv_bias_grads
    if generated is True or (generated == "auto" and device_type == "cuda"):
        from .conv_bias_grads import split_bias_grads

        gm, more = split_bias_grads(gm)
        convolution_log += more
    if options.channels_last == "always" or (
        options.channels_last == "auto"
        and device_type == "cuda"
        and (inference_meta or training_meta)
    ):
        from .channels_last import depthwise_kernel, use_channels_last, use_channels_last_training

        depthwise = options.depthwise_convolutions == "always" or (
            options.depthwise_convolutions == "auto" and depthwise_kernel(device_type) is not None
        )
        if training_meta:
            # "auto" leaves training graphs to cuDNN: on an H100 ConvNeXt-tiny's bf16 step
            # spent 1.8 ms less in kernels with the strip kernel's forward and input gradients,
            # but the step is host-bound (20 ms of host time), and with the kernel's launches
            # relaunched directly (codegen-triton 0.9.29, even host time) it still ran 4-13%
            # slower (session 48; session 47, through fn[grid]: 2.8 ms more host time)
            gm, more = use_channels_last_training(
                gm,
                free_saved,
                options.depthwise_convolutions == "always",
                options.direct_convolution_taps,
            )
        else:
            gm, more = use_channels_last(gm, options.direct_convolution_taps, depthwise)
        convolution_log += more
    if options.coalesce_transposed_copies:
        from .transposed_copies import coalesce_transposed_copies

        gm, more = coalesce_transposed_copies(gm)
        linear_log += more
    if options.fold_scatter_adds:
        from .scatter_add_fold import fold_scatter_adds

        gm, more = fold_scatter_adds(gm)
        linear_log += more
    epilogues = options.cublas_epilogues
    if epilogues == "always" or (epilogues == "measure" and device_type == "cuda"):
        from .cublas_epilogues import use_cublas_epilogues

        gm, more = use_cublas_epilogues(gm, epilogues)
        linear_log += more
    if options.pad_matmuls == "always" or (options.pad_matmuls == "auto" and device_type == "cuda"):
        from .pad_mm import pad_matmuls

        # float32 products gain from alignment only on TF32 tensor cores (pad_mm.py)
        float32 = options.pad_matmuls == "always" or torch.backends.cuda.matmul.allow_tf32
        gm, more = pad_matmuls(gm, free_outputs, options.pad_matmul_outputs_only, float32)
        linear_log += more
    graph_ir = lower(gm, example_inputs, options, backend.capabilities)
    graph_ir.in_place = in_place
    lap("lowering")
    choose = getattr(backend, "choose_matmul_template", None)
    scheduled = schedule(graph_ir, backend.capabilities, options, choose)
    linear_log += scheduled.template_log
    lap("scheduling")
    specs = [s for s in scheduled.steps if isinstance(s, KernelSpec)]
    kernels = list(backend.compile_kernels(specs)) if specs else []
    lap("codegen")
    call, source, path = load_wrapper(scheduled, kernels, options.cache_dir)
    lap("wrapper")
    return CompiledGraph(
        graph_ir,
        scheduled,
        kernels,
        source,
        path,
        call,
        phases,
        constants=tuple(constants),
        convolution_log=convolution_log,
        linear_log=linear_log,
    )


def lift_constants(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> tuple[torch.fx.GraphModule, list[Any], list[torch.Tensor]]:
    """Tensor constants of ``gm`` as trailing inputs: ``(gm', inputs + constants, constants)``.

    make_fx keeps a tensor the traced function built from data (``torch.tensor([1., 2.])``) as a
    ``get_attr`` node (``_tensor_constant0``). Lowered as an input, the constant is read by the
    kernels like any input and never reused for another buffer; the wrapper stays free of data.
    ``gm`` itself is left unchanged (a copy of its graph is rewritten). Other ``get_attr`` nodes
    (submodules) are kept, and lowering declines them.
    """
    attrs = [
        n
        for n in gm.graph.nodes
        if n.op == "get_attr" and isinstance(_attr(gm, n.target), torch.Tensor)
    ]
    if not attrs:
        return gm, list(example_inputs), []
    from .mkldnn import copied_graph  # (imported lazily, as the passes are)

    graph, copies = copied_graph(gm)
    last = [copies[n] for n in gm.graph.nodes if n.op == "placeholder"]
    constants = []
    for node in attrs:
        value = _attr(gm, node.target)
        anchor = last[-1] if last else next(iter(graph.nodes))
        with graph.inserting_after(anchor) if last else graph.inserting_before(anchor):
            ph = graph.placeholder(f"constant_{node.target.replace('.', '_')}")
        ph.meta = dict(copies[node].meta)
        ph.meta.setdefault("val", value)
        copies[node].replace_all_uses_with(ph)
        graph.erase_node(copies[node])
        last.append(ph)
        constants.append(value.detach())
    return torch.fx.GraphModule(gm, graph), [*example_inputs, *constants], constants


def _attr(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value
