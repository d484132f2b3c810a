"""The per-graph Python wrapper: allocate, launch kernels, call externs, make views, free.

The wrapper is generated as Python source (readable, cached on disk under
``<cache root>/wrappers/<hash>/wrapper.py``, see codecache.py) and loaded as a module; its
``make(...)`` binds the compiled kernels and extern callables and returns ``call(args) -> list``.
Everything the hot path needs is a local name: no dict lookups, no sympy at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree

from .backend import (
    BufferRef,
    ExternCall,
    Free,
    KernelSpec,
    ScheduledGraph,
    StreamLaunch,
    SymbolSource,
    View,
)
from .codecache import CodeCache, source_module
from .errors import LoweringError, OutputShapeChanged


def pyexpr(e: Any) -> str:
    """A size expression as Python source (FloorDiv/ModularIndexing/Min/Max are helpers in the module)."""
    if isinstance(e, sympy.Basic):
        if e.is_Integer:
            return str(int(e))
        return str(e)
    return repr(e)


def _tuple(values: Sequence[Any]) -> str:
    items = ", ".join(pyexpr(v) for v in values)
    return f"({items},)" if len(values) == 1 else f"({items})"


def make_extern(step: ExternCall, out_specs: Sequence[Any] = ()) -> Callable[..., Any]:
    """A callable ``f(*dynamic_leaves) -> tuple of outputs`` for one extern call.

    Dynamic leaves (buffers and symbolic sizes) come in the order of ``extern_leaves(step)``.
    ``out_specs`` (BufferSpec or None per output): where the kernels after the call expect each
    output's layout; an ATen kernel whose result strides differ (its inputs were realized with
    other strides than at trace time, e.g. attention) has its result copied into that layout.
    A fallback's output of static size is checked against it too (an op whose output size
    depends on the data, such as nonzero or x[mask], raises OutputShapeChanged).

    An output traced empty, of an op whose output sizes do not depend on the data, is passed on
    as the op returns it, unchecked: a workspace whose size only the kernel knows, which its
    meta function gives as empty (``mkldnn_rnn_layer``'s fourth output: 28672 values for a small
    LSTM, or None under no_grad). No kernel reads elements of an empty buffer; the backward
    op it is saved for takes it as the forward returned it.
    """
    sized_by_inputs = _sizes_from_inputs(step.op)
    fixed = [
        (i, tuple(int(v) for v in sp.size), tuple(int(v) for v in sp.stride))
        for i, sp in enumerate(out_specs)
        if sp is not None
        and all(isinstance(v, sympy.Integer) for v in (*sp.size, *sp.stride))
        and not (sized_by_inputs and 0 in sp.size)
    ]
    call = _make_extern(step, fixed)
    symbolic = [
        (i, f)
        for i, sp in enumerate(out_specs)
        if sp is not None
        and not all(isinstance(v, sympy.Integer) for v in (*sp.size, *sp.stride))
        and (f := _stride_fn(sp)) is not None
    ]
    if not symbolic:
        return call
    inner = call

    def relaid(*values):
        # symbolic sizes: the strides the kernels after this call were generated for, from
        # the result's own sizes; a result laid out otherwise is copied into that layout
        outs = inner(*values)
        for i, strides_of in symbolic:
            r = outs[i]
            if isinstance(r, torch.Tensor) and r.numel() > 1:
                want = strides_of(r)
                if r.stride() != want:
                    outs = list(outs)
                    outs[i] = torch.empty_strided(
                        r.shape, want, dtype=r.dtype, device=r.device
                    ).copy_(r)
        return outs

    return relaid


def _stride_fn(spec: Any) -> Callable[[torch.Tensor], tuple[int, ...]] | None:
    """``f(result) -> strides`` for a symbolic layout, its size symbols read from the result's
    shape (None when a stride uses a symbol no dim of the result shows on its own)."""
    bind = {}
    for dim, size in enumerate(spec.size):
        if isinstance(size, sympy.Symbol) and size not in bind:
            bind[size] = dim
    if not all(st.free_symbols <= set(bind) for st in map(sympy.sympify, spec.stride)):
        return None
    lines = [f"    {sym} = r.shape[{dim}]" for sym, dim in bind.items()]
    body = "\n".join(lines) + ("\n" if lines else "")
    source = f"def strides(r):\n{body}    return {_tuple(spec.stride)}\n"
    ns = {
        "FloorDiv": lambda a, b: a // b,
        "ModularIndexing": lambda a, b, c: (a // b) % c,
        "Min": min,
        "Max": max,
    }
    exec(compile(source, "<extern strides>", "exec"), ns)  # noqa: S102 - our own generated code, as the wrapper module
    return ns["strides"]


def _relayout(r: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """``r`` copied into the layout the kernels after its extern call were generated for."""
    return torch.empty_strided(size, stride, dtype=r.dtype, device=r.device).copy_(r)


def _changed_shape(step: ExternCall, r: Any, size: tuple[int, ...]) -> OutputShapeChanged:
    return OutputShapeChanged(
        f"fallback {step.op} returned shape {tuple(r.shape)} but the graph was traced "
        f"with {size} (its output size depends on the data); trace again with these "
        "inputs, or mark the op as a graph break in the front end"
    )


def _makes_workspace_under_grad(step: ExternCall) -> bool:
    """A CPU LSTM layer (oneDNN) whose workspace, its fourth output, is used (saved for the
    backward): the kernel returns None for it unless grad mode is on."""
    return (
        step.op is torch.ops.aten.mkldnn_rnn_layer.default
        and len(step.outputs) == 4
        and bool(step.outputs[3])
    )


def _sizes_from_inputs(op: Any) -> bool:
    """Whether ``op`` is an ATen operator whose output sizes follow from its inputs' (not tagged
    ``dynamic_output_shape``, as nonzero and masked_select are)."""
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.dynamic_output_shape not in op.tags


def _returns_tensors(op: Any, n_out: int) -> bool:
    """Whether ``op`` returns exactly ``n_out`` plain tensors (one, or a tuple of them) by its
    schema: its result then needs no flattening."""
    schema = getattr(op, "_schema", None)
    if not isinstance(op, torch._ops.OpOverload) or schema is None:
        return False
    returns = schema.returns
    return n_out > 0 and len(returns) == n_out and all(str(r.type) == "Tensor" for r in returns)


#: the modules of torch._C holding ATen operators' Python bindings (torch.convolution's is
#: ``_VariableFunctions``, F.gelu's ``_nn``)
_BINDING_MODULES = ("_VariableFunctions", "_nn", "_linalg", "_special", "_fft")


def python_binding(op: Any) -> Callable[..., Any] | None:
    """The Python binding of ATen operator ``op`` (``torch.convolution`` for
    ``aten.convolution.default``) where it can only mean this overload: the operator has no
    other overload than its ``out=`` form, which a call without ``out`` never picks. None
    otherwise (``aten.mm`` has ``dtype`` overloads too; an operator with no binding, such as
    ``convolution_backward``, is called through its operator object).

    The binding parses its arguments in generated C++; the operator object converts them by its
    schema, list by list: a small convolution's extern call took 3.7 us through
    ``torch.convolution`` and 8.2 us through ``aten.convolution.default``'s C++ function on the
    CPU (session 36, 2 cores, ``python benchmarks/host_glue_micro.py``), and a ResNet-50
    training step makes 53 such calls. Both honour torch function modes and subclasses the
    same way (the mode sees the binding instead of the operator)."""
    if (
        not isinstance(op, torch._ops.OpOverload)
        or op.namespace != "aten"
        or op._overloadname != "default"
    ):
        return None
    packet = op.overloadpacket
    if any(name not in ("default", "out") for name in packet.overloads()):
        return None
    for module in _BINDING_MODULES:
        binding = getattr(getattr(torch._C, module, None), packet.__name__, None)
        if binding is not None:
            return binding
    return None


def _make_extern(
    step: ExternCall, fixed: Sequence[tuple[int, tuple[int, ...], tuple[int, ...]]] = ()
) -> Callable[..., Any]:
    """``f(*dynamic_leaves) -> list of outputs``, generated as Python source: the call's argument
    structure is spelled out once, constants bound by name, so a call does no pytree work (an
    unflatten per call was a third of unet's host time under cProfile:
    benchmarks/gpu_profile.py --python, log in benchmarks/results/gpu-2026-12-01/run5/).

    ``fixed`` (output position, size, stride): the static layouts the kernels after the call
    expect; the check of each is spelled out in the same function (a separate checking closure
    and its loop cost about a microsecond per call), as is, for an ATen operator, the call of its
    Python binding where one means that overload (``python_binding``), else of its C++ function
    (``OpOverload.__call__`` is one more Python frame that only forwards)."""
    op = step.op
    n_out = len(step.outputs)
    # loop-ir's own operators are called as the Python functions behind them: the dispatcher's
    # round trip cost ~8 us per convolution (mkldnn.py)
    from .channels_last import DIRECT_CALLS as CHANNELS_LAST_CALLS
    from .linear_group import DIRECT_CALLS as GROUP_CALLS
    from .mkldnn import DIRECT_CALLS
    from .mkldnn_linear import DIRECT_CALLS as LINEAR_CALLS
    from .pad_mm import DIRECT_CALLS as PAD_CALLS

    target = {
        **DIRECT_CALLS,
        **LINEAR_CALLS,
        **GROUP_CALLS,
        **CHANNELS_LAST_CALLS,
        **PAD_CALLS,
    }.get(op, op)
    if isinstance(target, torch._ops.OpOverload):
        binding = python_binding(target)
        if binding is not None:
            target = binding
        elif callable(getattr(target, "_op", None)):
            target = target._op
    ns: dict[str, Any] = {"op": target, "_step": step}
    n_dyn = [0]

    def const(value: Any) -> str:
        name = f"c{len(ns)}"
        ns[name] = value
        return name

    buffer_leaves: list[int] = []  # the dynamic leaves that are tensors

    def expr(x: Any) -> str:
        if _is_dynamic(x):
            if isinstance(x, BufferRef):
                buffer_leaves.append(n_dyn[0])
            n_dyn[0] += 1
            return f"v{n_dyn[0] - 1}"
        if isinstance(x, (list, tuple)):
            if not any(_is_dynamic(leaf) for leaf in pytree.tree_leaves(x)):
                return const(
                    type(x)(_static(leaf) for leaf in x)
                    if type(x) in (list, tuple)
                    else [_static(leaf) for leaf in x]
                )
            items = ", ".join(expr(item) for item in x)
            return f"({items},)" if isinstance(x, tuple) else f"[{items}]"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{const(k)}: {expr(v)}" for k, v in x.items()) + "}"
        return const(_static(x))

    # the leaves come in tree_flatten order: args left to right, then kwargs in insertion order
    parts = [expr(a) for a in step.args] + [f"{k}={expr(v)}" for k, v in dict(step.kwargs).items()]
    params = ", ".join(f"v{i}" for i in range(n_dyn[0]))
    ns["_leaves"], ns["_n_out"], ns["_Tensor"] = pytree.tree_leaves, n_out, torch.Tensor
    ns["_relayout"], ns["_changed_shape"] = _relayout, _changed_shape
    # a fallback may be an op whose output size depends on the data (nonzero, x[mask]): check it
    check_size = step.kind == "fallback"

    def checks(flat: str, known: bool = False) -> list[str]:
        """Lines checking (and relaying out) each fixed output of ``flat`` (a list, or the one
        output itself when ``flat`` is "result"); ``known``: by the schema, a tensor."""
        lines = []
        for i, size, stride in fixed:
            size_c, stride_c = const(size), const(stride)
            r = flat if flat == "result" else f"{flat}[{i}]"
            indent = "    " if known else "        "
            if not known:
                lines.append(f"    if isinstance({r}, _Tensor):")
            if check_size:
                lines.append(f"{indent}if {r}.shape != {size_c}:")
                lines.append(f"{indent}    raise _changed_shape(_step, {r}, {size_c})")
            lines.append(f"{indent}if {r}.stride() != {stride_c} and {r}.numel() > 1:")
            lines.append(f"{indent}    {r} = _relayout({r}, {size_c}, {stride_c})")
        return lines

    body = [f"def call({params}):", f"    result = op({', '.join(parts)})"]
    if _makes_workspace_under_grad(step):
        # the kernel makes the workspace its backward reads only when grad mode is on, and a
        # training forward runs with it off (inside autograd.Function.forward): on here, for
        # detached inputs, so that no autograd history is recorded
        ns["_enable_grad"] = torch.enable_grad
        body[1:] = [
            *(f"    v{i} = v{i}.detach()" for i in buffer_leaves),
            "    with _enable_grad():",
            f"        result = op({', '.join(parts)})",
        ]
    known = _returns_tensors(step.op, n_out)
    if known and n_out == 1:
        # by its schema the result is one tensor: nothing to flatten or test
        body += [*checks("result", known=True), "    return (result,)"]
    elif known:
        # by its schema a tuple of n_out tensors: no pytree flattening (a few us per call)
        body += (
            ["    return result"]
            if not fixed
            else ["    flat = list(result)", *checks("flat", known=True), "    return flat"]
        )
    else:
        body += [
            "    if isinstance(result, _Tensor):",
            "        flat = [result]",
            "    else:",
            "        flat = _leaves(result)",
            "        if len(flat) != _n_out:",
            '            raise RuntimeError(f"{op} returned {len(flat)} values, expected {_n_out}")',
        ]
        body += [*checks("flat"), "    return flat"]
    source = "\n".join(body) + "\n"
    # one file name per call site: cProfile keys its entries by (file, line, name), so sites
    # sharing a name overwrote each other's figures (a profile showed one mm call of hundreds)
    where = f"<extern {op} -> {', '.join(o or '_' for o in step.outputs)}>"
    exec(compile(source, where, "exec"), ns)  # noqa: S102 - our own generated code, as the wrapper module
    return ns["call"]


def _static(x: Any) -> Any:
    """A constant leaf as a plain Python value (sympy numbers become int/float)."""
    if isinstance(x, sympy.Basic) and x.is_Integer:
        return int(x)
    if isinstance(x, sympy.Basic) and x.is_number:
        return float(x)
    if isinstance(x, (list, tuple)):
        return [_static(v) for v in x]
    return x


def _is_dynamic(x: Any) -> bool:
    return isinstance(x, BufferRef) or (isinstance(x, sympy.Basic) and not x.is_number)


def extern_leaves(step: ExternCall) -> list[str]:
    leaves = pytree.tree_leaves((step.args, dict(step.kwargs)))
    return [x.name if isinstance(x, BufferRef) else pyexpr(x) for x in leaves if _is_dynamic(x)]


def wrapper_source(graph: ScheduledGraph, stream_launch: bool = False) -> str:
    """The wrapper module's source for ``graph``.

    ``stream_launch``: the kernels follow ``StreamLaunch`` (backend.py): the wrapper fetches the
    launch stream once per call and launches each kernel as ``k.launch_in(stream, *args)``,
    the stream None unless every tensor it hands a kernel is 16-byte aligned (only graphs whose
    kernels are all on one device: a stream belongs to one)."""
    lines = [
        "# torchkiln wrapper (generated by torchkiln_loop_ir.wrapper)",
        "import torch",
        "from torch import empty_strided as _empty, as_strided as _as_strided",
        "",
        "",
        "def FloorDiv(a, b):",
        "    return a // b",
        "",
        "",
        "def ModularIndexing(a, b, c):",
        "    return (a // b) % c",
        "",
        "",
        "Min, Max = min, max  # sizes from min()/max() of a size (torch.sym_min/sym_max)",
        "",
        "",
        "def make(kernels, externs, devices):",
    ]
    kernel_steps = [s for s in graph.steps if isinstance(s, KernelSpec)]
    extern_steps = [s for s in graph.steps if isinstance(s, ExternCall)]
    devices = sorted({str(b.device) for b in graph.buffers.values()})
    if kernel_steps:
        lines.append(f"    ({', '.join(s.name for s in kernel_steps)},) = kernels")
    if extern_steps:
        lines.append(
            f"    ({', '.join(f'extern{i}' for i in range(len(extern_steps)))},) = externs"
        )
    for i in range(len(devices)):
        lines.append(f"    dev{i} = devices[{i}]")
    dev_name = {d: f"dev{i}" for i, d in enumerate(devices)}
    # the kernels' one device (a CPU scalar input of a GPU graph does not prevent it)
    kernel_devices = _kernel_devices(graph, kernel_steps) if stream_launch else set()
    stream_launch = (
        stream_launch and len(kernel_devices) == 1 and next(iter(kernel_devices)) in dev_name
    )  # (None: not known)
    if stream_launch:
        lines.append(f"    _stream_for = {kernel_steps[0].name}.stream_for")
    # dtypes are bound once here, not looked up as ``torch.<dtype>`` on every call
    dtypes = sorted(
        {
            str(graph.buffers[name].dtype)
            for step in graph.steps
            if isinstance(step, KernelSpec)
            for name in step.outputs
            if name not in step.inputs and name not in graph.reuse
        }
    )
    dtype_name = {d: f"dt{i}" for i, d in enumerate(dtypes)}
    for d, local in dtype_name.items():
        lines.append(f"    {local} = {d}")
    lines.append("")
    lines.append("    def call(args):")
    body: list[str] = []
    if graph.inputs:
        body.append(f"{', '.join(graph.inputs)}, = args")
    # a list is the caller's giving its references away (CompiledGraph.call_boxed): with the list
    # emptied, an input's ``del`` at its last use frees it (a backward's saved activations)
    body.append("if args.__class__ is list:")
    body.append("    args.clear()")
    body += _bind_symbols(graph)
    aligned = (
        _AlignedTensors(graph, dev_name[next(iter(kernel_devices))]) if stream_launch else None
    )
    if aligned is not None:
        body.append(aligned.first_line())
    bound = {sym.name for sym in graph.size_symbols}
    reused_by = {old: new for new, old in graph.reuse.items()}
    inputs = set(graph.inputs)
    # buffers a kernel's output is written over (memory.py): the kernel still reads them by
    # name, so their name is deleted at their Free after it, not where the reuse binds it
    kept_names: set[str] = set()
    ext = 0
    for step in graph.steps:
        if isinstance(step, KernelSpec):
            for name in step.outputs:
                if name in step.inputs:
                    continue
                if name in graph.reuse:
                    old = graph.reuse[name]
                    if old in inputs:  # a mutated input written in place (in_place.py)
                        body.append(f"{name} = {old}")
                        continue
                    if old in step.inputs:  # written over its own input (memory.py)
                        body.append(f"{name} = {old}")
                        kept_names.add(old)
                        continue
                    body.append(f"{name} = {old}; del {old}")
                    continue
                b = graph.buffers[name]
                body.append(
                    f"{name} = _empty({_tuple(b.size)}, {_tuple(b.stride)}, dtype={dtype_name[str(b.dtype)]}, "
                    f"device={dev_name[str(b.device)]})"
                )
            args = list(step.args) + [s.name for s in step.size_args]
            if aligned is None:
                body.append(f"{step.name}({', '.join(args)})")
            else:
                body += aligned.before_launch(step)
                body.append(f"{step.name}.launch_in(_s, {', '.join(args)})")
            if any(graph.reuse.get(name) in inputs for name in step.outputs):
                body.append("_written = True")
        elif isinstance(step, ExternCall):
            # a scalar result binds its size symbol (``.item()``: u0 = extern(...))
            scalars = step.scalars or ("",) * len(step.outputs)
            outs = [o or sym or "_" for o, sym in zip(step.outputs, scalars)]
            bound.update(sym for sym in scalars if sym)
            call = f"extern{ext}({', '.join(extern_leaves(step))})  # {step.kind} {step.op}"
            body.append(f"{', '.join(outs)}, = {call}" if outs else call)
            ext += 1
            # a size only this call's result knows (nonzero, x[mask]): read it from the result
            for out in filter(None, step.outputs):
                for dim, size in enumerate(graph.buffers[out].size):
                    if isinstance(size, sympy.Symbol) and size.name not in bound:
                        body.append(f"{size.name} = {out}.shape[{dim}]")
                        bound.add(size.name)
        elif isinstance(step, View):
            # no offset: as_strided keeps the base's own storage offset (no arithmetic per call)
            offset = (
                ""
                if step.offset == 0
                else f", {pyexpr(step.offset)} + {step.base}.storage_offset()"
            )
            body.append(
                f"{step.name} = _as_strided({step.base}, {_tuple(step.size)}, {_tuple(step.stride)}{offset})"
            )
            if aligned is not None:
                aligned.view(step)
        elif isinstance(step, Free) and (step.name not in reused_by or step.name in kept_names):
            body.append(f"del {step.name}")
    body.append(
        "return [" + ", ".join(o if isinstance(o, str) else pyexpr(o) for o in graph.outputs) + "]"
    )
    if any(old in inputs for old in graph.reuse.values()):
        body = _marking_written_inputs(body)
    unbound = sorted(_symbols_used(graph) - bound)
    if unbound:
        # refuse at compile time (a clean eager fallback) rather than a NameError on a call
        raise LoweringError(
            f"size symbol(s) {', '.join(unbound)} used by the graph come from no "
            "input size, stride or value and no extern result"
        )
    lines.extend("        " + line for line in body)
    lines.append("")
    lines.append("    return call")
    lines.append("")
    return "\n".join(lines)


def _marking_written_inputs(body: list[str]) -> list[str]:
    """``body`` in a ``try`` whose handler marks an exception raised after a kernel wrote a graph
    input in place (in_place.py): the caller must not run the graph again (eagerly), which would
    apply that mutation twice."""
    return [
        "_written = False",
        "try:",
        *("    " + line for line in body),
        "except BaseException as _error:",
        "    if _written:",
        "        try:",
        "            _error.inputs_written_in_place = True",
        "        except AttributeError:",
        "            pass",
        "    raise",
    ]


def _kernel_devices(graph: ScheduledGraph, kernel_steps: Sequence[KernelSpec]) -> set[str | None]:
    """The devices of the tensors the kernels take (None for one whose device is not known: a
    kernel step rebuilt from a cache entry may carry only some of its buffers)."""
    devices: set[str | None] = set()
    for step in kernel_steps:
        for name in step.args:
            spec = step.buffers.get(name) or graph.buffers.get(name)
            devices.add(str(spec.device) if spec is not None else None)
    return devices


class _AlignedTensors:
    """Which tensors the wrapper hands its kernels are 16-byte aligned (Triton specializes a
    binary on it; a kernel's ready launch was built for aligned tensors): its own allocations
    and reuses of them, and views of aligned tensors at an aligned constant offset, by
    construction; graph inputs, extern results and other views by a check of their address,
    where each is bound (the inputs at the top, in one expression), which sets the call's stream
    ``_s`` to None when one fails (every kernel then takes its general path)."""

    def __init__(self, graph: ScheduledGraph, device: str) -> None:
        self.graph, self.device = graph, device
        used = {name for step in graph.steps if isinstance(step, KernelSpec) for name in step.args}
        #: tensors known aligned, or checked, where the wrapper stands
        self.known = {name for name in graph.inputs if name in used}

    def first_line(self) -> str:
        names = sorted(self.known, key=self.graph.inputs.index)
        if not names:
            return f"_s = _stream_for({self.device})"
        ptrs = " | ".join(f"{name}.data_ptr()" for name in names)
        return f"_s = None if ({ptrs}) & 15 else _stream_for({self.device})"

    def view(self, step: View) -> None:
        offset = sympy.sympify(step.offset)
        base = self.graph.buffers.get(step.base)
        if step.base in self.known and offset.is_Integer and base is not None:
            if int(offset) * base.dtype.itemsize % 16 == 0:
                self.known.add(step.name)

    def before_launch(self, step: KernelSpec) -> list[str]:
        """Checks of the arguments of ``step`` not known aligned (extern results, odd views);
        the kernel's fresh outputs are allocated aligned (and a reuse of an aligned buffer is)."""
        lines = []
        for name in step.outputs:
            if name not in step.inputs and (
                name not in self.graph.reuse or self.graph.reuse[name] in self.known
            ):
                self.known.add(name)
        for name in step.args:
            if name not in self.known:
                lines.append(f"if {name}.data_ptr() & 15:")
                lines.append("    _s = None")
                self.known.add(name)
        return lines


def _bind_symbols(graph: ScheduledGraph) -> list[str]:
    """Lines binding each size symbol from the inputs: plain reads first, then solved ones in the
    order lowering found them (a solved symbol's expression may use symbols bound before it)."""
    sources = [
        (
            sym,
            src
            if isinstance(src, SymbolSource)
            else SymbolSource(src[0], "value" if src[1] == -1 else "size", src[1]),
        )
        for sym, src in graph.size_symbols.items()
    ]
    direct = sorted(
        ((sym, src) for sym, src in sources if src.solve is None), key=lambda kv: kv[0].name
    )
    lines = []
    for sym, src in [*direct, *((sym, src) for sym, src in sources if src.solve is not None)]:
        read = src.read(graph.inputs[src.pos])
        if src.solve is None:
            lines.append(f"{sym.name} = {read}")
        else:  # round(): the solution may divide (stride 2*s37 -> s37 = _v/2), sizes are ints
            lines.append(f"_v = {read}")
            lines.append(f"{sym.name} = round({pyexpr(src.solve)})")
    return lines


def _symbols_used(graph: ScheduledGraph) -> set[str]:
    """Names of the size symbols the wrapper's steps and outputs refer to."""
    exprs: list[Any] = [o for o in graph.outputs if not isinstance(o, str)]
    for step in graph.steps:
        if isinstance(step, KernelSpec):
            exprs += step.size_args
            for name in step.outputs:
                if name not in step.inputs and name not in graph.reuse:
                    exprs += [*graph.buffers[name].size, *graph.buffers[name].stride]
        elif isinstance(step, ExternCall):
            exprs += [
                x
                for x in pytree.tree_leaves((step.args, dict(step.kwargs)))
                if isinstance(x, sympy.Basic)
            ]
        elif isinstance(step, View):
            exprs += [*step.size, *step.stride, step.offset]
    return {s.name for e in exprs if isinstance(e, sympy.Basic) for s in e.free_symbols}


def load_wrapper(
    graph: ScheduledGraph, kernels: Sequence[Any], cache_dir: str | None = None
) -> tuple[Callable[..., Any], str, str]:
    """Write (through the shared code cache, verified before it runs), load and bind the wrapper:
    returns (call, source, path). ``cache_dir``: the cache root (None: ``codecache.cache_root``)."""
    # the kernels' launch protocol (backend.StreamLaunch): a stream fetched once per call
    stream_launch = bool(kernels) and all(isinstance(k, StreamLaunch) for k in kernels)
    source = wrapper_source(graph, stream_launch=stream_launch)
    module, path = source_module(
        CodeCache.at("wrappers", cache_dir), source, "wrapper.py", "torchkiln_wrapper_"
    )
    externs = [
        make_extern(s, [graph.buffers.get(o) if o else None for o in s.outputs])
        for s in graph.steps
        if isinstance(s, ExternCall)
    ]
    devices = [torch.device(d) for d in sorted({str(b.device) for b in graph.buffers.values()})]
    return module.make(list(kernels), externs, devices), source, str(path)
