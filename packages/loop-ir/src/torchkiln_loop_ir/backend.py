"""What loop-ir hands a code generator, and the ``Backend`` protocol code generators implement.

A compiled graph is a ``ScheduledGraph``: buffers plus an ordered list of steps. Kernel steps are
``KernelSpec``s: fused loop nests whose bodies are define-by-run functions calling ``ops.*``
(see ``ops.py``). A code generator installs its own ops handler, calls each body with its index
symbols, and so turns the body into source text. The per-graph wrapper (allocation, extern calls,
launches, frees) is built by loop-ir from the steps; a backend only compiles kernels.

Kernel loop structure (the same for every backend)::

    for x-index in product(xranges):          # parallel; a Triton program covers a block of these
        for stage in stages:
            if stage.kind == "loop":
                for r-index in product(rranges):   # absent when rranges == ()
                    for node in stage.nodes: node.body(xvars, rvars)
            else:  # "epilogue": runs once per x-index, after the stages before it
                for node in stage.nodes: node.body(xvars, ())

Inside a kernel, ``ops.reduction`` accumulates across the r-loop of its stage; its result (and
anything computed from it) is available to later stages. ``ops.store`` to a name in
``local_buffers`` writes no memory: a later ``ops.load`` of that name at the same index expression
returns the stored value (the code generator keeps a store cache). Loads of a name in ``inputs``
read memory; stores of a name in ``outputs`` write memory.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import sympy
import torch

Body = Callable[[Sequence[sympy.Symbol], Sequence[sympy.Symbol]], None]


@dataclass(frozen=True)
class BufferSpec:
    """A named tensor: its element type, device and strided layout (sizes may be symbolic)."""

    name: str
    dtype: torch.dtype
    device: torch.device
    size: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)  # noqa: RUF009 (an immutable constant)


@dataclass(frozen=True)
class KernelNode:
    """One buffer computed inside a fused kernel. ``body(xvars, rvars)`` emits its ops."""

    buffer: str
    body: Body
    is_reduction: bool = False
    origin: str = ""  # the ATen node(s) it came from, for printing and reports
    # a reduction over the rows of one program of a kernel with ``row_programs`` (its r index
    # is the row within the program's chunk, its x the program and the kernel's r): see
    # ``mixed_order.py``
    across_rows: bool = False


@dataclass(frozen=True)
class KernelStage:
    kind: Literal["loop", "epilogue"]
    nodes: tuple[KernelNode, ...]


@dataclass(frozen=True)
class MatmulTemplate:
    """A kernel whose x range is a matrix product's result, computed in the kernel itself
    (``matmul_templates.py``): ``a`` (M x K) times ``b`` (K x N), plus ``bias`` (broadcast to
    M x N) when there is one, rounded to ``product``'s dtype. The kernel's stages are the
    product's pointwise consumers (its epilogue): a load of ``product`` (or of a name in
    ``aliases``, views of it at the same elements) at the kernel's row-major flat index reads
    the product's value, which is never written to memory. ``tile``: the code generator's
    launch choice (block sizes, warps, stages), named by it; empty: its heuristic."""

    product: str
    a: str
    b: str
    bias: str | None
    m: int
    n: int
    k: int
    aliases: tuple[str, ...] = ()
    tile: tuple[tuple[str, int], ...] = ()

    @property
    def operands(self) -> tuple[str, ...]:
        """The buffers the product reads, in the kernel's argument order."""
        return (self.a, self.b) + ((self.bias,) if self.bias is not None else ())

    @property
    def names(self) -> frozenset[str]:
        """The product's names (itself and its aliases): loads of them read the product."""
        return frozenset((self.product, *self.aliases))


@dataclass(frozen=True)
class KernelSpec:
    """A fused loop nest: what one generated kernel computes."""

    name: str
    xranges: tuple[sympy.Expr, ...]
    rranges: tuple[sympy.Expr, ...]
    stages: tuple[KernelStage, ...]
    buffers: Mapping[str, BufferSpec]  # every buffer the kernel loads or stores
    inputs: tuple[str, ...]  # read from memory
    outputs: tuple[str, ...]  # written to memory
    local_buffers: frozenset[str] = frozenset()
    size_args: tuple[sympy.Symbol, ...] = ()  # symbols the kernel needs at run time, in order
    # a mixed-order kernel (``mixed_order.py``): its x range (rows) is cut into this many
    # chunks of equal length, one a program (index ``ROW_PROGRAM``), each program looping over
    # its chunk's rows; its ``across_rows`` nodes reduce over the rows of the chunk, one partial
    # a program. 0: an ordinary kernel
    row_programs: int = 0
    # a combo kernel (``combos.py``): these kernels, independent pointwise kernels of static
    # sizes, launched as one, each member over its own x range in programs of its own (the
    # combo's ``stages`` are empty; its inputs, outputs, buffers and size args are the members'
    # together, and its xranges their element counts summed). Only a backend whose
    # ``BackendCapabilities.combo_kernels`` allows it is handed one. (): an ordinary kernel
    combo: tuple[KernelSpec, ...] = ()
    # a matrix product computed in the kernel, its stages the product's epilogue
    # (``MatmulTemplate``); only a backend whose ``BackendCapabilities.matmul_templates``
    # allows it is handed one. None: an ordinary kernel
    template: MatmulTemplate | None = None

    @property
    def args(self) -> tuple[str, ...]:
        """Buffer arguments, in call order: inputs, then outputs not already inputs."""
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    @property
    def is_reduction(self) -> bool:
        return bool(self.rranges)


@dataclass(frozen=True)
class BufferRef:
    """An argument of an extern call that names a buffer."""

    name: str


@dataclass(frozen=True)
class ExternCall:
    """A call of an ATen kernel (a named extern such as mm, or a fallback for an unlowered op).

    ``args``/``kwargs`` are pytrees whose leaves are ``BufferRef``, sympy expressions (sizes,
    evaluated at run time) or constants. The result, flattened as a pytree, binds ``outputs``.
    """

    op: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    outputs: tuple[str, ...]
    kind: Literal["extern", "fallback"] = "extern"
    reason: str = ""
    #: per output: the size symbol a scalar result binds (``.item()``'s u0), or ""
    scalars: tuple[str, ...] = ()


@dataclass(frozen=True)
class View:
    """``name`` is an as_strided view of buffer ``base``."""

    name: str
    base: str
    size: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)  # noqa: RUF009 (an immutable constant)


@dataclass(frozen=True)
class Free:
    """The wrapper may drop its reference to ``name`` here (its last use has passed)."""

    name: str


Step = KernelSpec | ExternCall | View | Free


@dataclass(frozen=True)
class SymbolSource:
    """Where the wrapper reads a size symbol from the graph's inputs.

    ``attr`` "size"/"stride": ``input.shape[dim]`` / ``input.stride(dim)``; "value": the input is
    the symbolic int itself (dim unused). ``solve``: when the input shows the symbol only inside an
    expression (a stride ``2*s37`` of a sliced input), the symbol as an expression of ``_v``, the
    value read (and of symbols bound before it).
    """

    pos: int
    attr: Literal["size", "stride", "value"] = "size"
    dim: int = -1
    solve: sympy.Expr | None = None

    def read(self, input_name: str) -> str:
        """Python source reading the value at this source from the input named ``input_name``."""
        if self.attr == "value":
            return input_name
        return f"{input_name}.{'shape' if self.attr == 'size' else 'stride()'}[{self.dim}]"


@dataclass(frozen=True)
class ScheduledGraph:
    inputs: tuple[str, ...]  # buffer names bound to the graph's inputs, in order
    # symbol -> where the wrapper reads it; bound in this order (a solved symbol may use earlier
    # ones). A (input position, dim) pair is a size, dim -1 the input itself.
    size_symbols: Mapping[sympy.Symbol, SymbolSource | tuple[int, int]]
    buffers: Mapping[str, BufferSpec]
    steps: tuple[Step, ...]
    outputs: tuple[Any, ...]  # buffer names (str) or constants, in the graph's output order
    # buffer -> earlier buffer it reuses; or -> a graph input: a mutated input's new value
    # written into the input itself (in_place.py), so a kernel may get the same memory as one of
    # its inputs and one of its outputs (read at an element before it writes it): code
    # generators must not declare kernel arguments non-aliasing
    reuse: Mapping[str, str] = field(default_factory=dict)
    # the scheduler's decisions (scheduler.FusionRecord: accepted and rejected, with reasons), in
    # order; kept with the schedule so a graph loaded from a cache entry still shows them
    fusion_log: tuple[Any, ...] = ()
    # one line per matrix product considered for a template kernel (``matmul_templates.py``)
    template_log: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackendCapabilities:
    """What a code generator can do, so the scheduler only forms kernels it can emit."""

    reduction_broadcast_reduction: bool  # a kernel may hold several reduction stages
    max_reduction_stages: int = 1
    # how many programs (parallel instances of a kernel's x loop) a kernel should launch to keep
    # the device busy: a GPU code generator sets a few per SM (codegen-triton: 4 x the SM count),
    # a CPU one 0 (its few cores are filled by the x loop). Lowering splits a long reduction whose
    # outputs give fewer programs than this (lowering/split_reductions.py); None: loop-ir decides
    # from the tensors' device (``default_parallel_programs``).
    parallel_programs: int | None = None
    # the longest row (r values) of a mixed-order kernel the code generator can emit: a
    # persistent row reduction that also reduces its columns across each program's rows
    # (``KernelSpec.row_programs``, ``mixed_order.py``); 0: none
    mixed_order_rnumel: int = 0
    # merge a kernel's adjacent x dims (and r dims) that every access walks as one
    # (``merge_dims.py``: NCHW's ``W*h + w`` becomes one dim of ``H*W``) before the code
    # generator sees it: fewer, longer loops and one index term fewer
    merge_dims: bool = False
    # the most kernels the backend launches as one combo kernel (``KernelSpec.combo``,
    # ``combos.py``): independent pointwise kernels, each over its own range; 0: none
    combo_kernels: int = 0
    # the backend computes a matrix product in a kernel whose stages are its pointwise
    # consumers (``KernelSpec.template``, ``matmul_templates.py``)
    matmul_templates: bool = False
    # deprecated: declared but never read (every backend must implement atomic-add stores, the
    # ops contract's ``store(..., mode="atomic_add")``); still accepted so code generators built
    # against an older loop-ir keep working, with a DeprecationWarning
    indirect_store_atomic_add: InitVar[bool | None] = None

    def __post_init__(self, indirect_store_atomic_add: bool | None) -> None:
        if indirect_store_atomic_add is not None:
            warnings.warn(
                "BackendCapabilities(indirect_store_atomic_add=...) is deprecated and ignored: "
                "every backend implements atomic-add stores (ops.store mode='atomic_add')",
                DeprecationWarning,
                stacklevel=3,
            )


#: programs per streaming multiprocessor that ``default_parallel_programs`` asks a GPU kernel for
PROGRAMS_PER_SM = 4


def target_programs(
    options_programs: int | None, caps: BackendCapabilities | None, device: Any
) -> int:
    """Programs a kernel on ``device`` should launch to fill it (the target of split and
    mixed-order reductions): ``options_programs`` (``LoopIROptions.split_programs``) when set,
    else the backend's ``BackendCapabilities.parallel_programs``, else
    ``default_parallel_programs``."""
    if options_programs is not None:
        return options_programs
    if caps is not None and caps.parallel_programs is not None:
        return caps.parallel_programs
    return default_parallel_programs(device)


def default_parallel_programs(device: torch.device | str | None) -> int:
    """Programs that keep ``device`` busy when the backend does not say
    (``BackendCapabilities.parallel_programs`` of None): ``PROGRAMS_PER_SM`` per SM of a CUDA
    device, 0 for anything else (a CPU's cores are filled by the x loop; splitting a reduction
    there only adds a pass)."""
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        return 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    return PROGRAMS_PER_SM * torch.cuda.get_device_properties(index).multi_processor_count


@runtime_checkable
class CompiledKernel(Protocol):
    name: str
    source: str
    path: str | None  # the source file on disk, when there is one

    def __call__(self, *args: Any) -> None:
        """Run the kernel: tensors for ``KernelSpec.args``, then ints for ``size_args``."""


@runtime_checkable
class StreamLaunch(Protocol):
    """What a compiled kernel may offer on top of ``CompiledKernel`` so that the wrapper pays
    the launch's fixed costs once per call, not once per kernel (a GPU step whose kernels are
    short is made of these host costs): ``stream_for(device)`` is the stream to launch in for
    one call, or None when the kernels must each take their general path (a launch hook is
    installed, another device is current); ``launch_in(stream, *args)`` launches in it, the
    caller vouching that every tensor is 16-byte aligned (a stream of None vouches for nothing)."""

    def stream_for(self, device: Any) -> Any: ...

    def launch_in(self, stream: Any, *args: Any) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A code generator: turns the ``KernelSpec``s of one graph into runnable kernels.

    All kernels of a graph come in one call so a backend can build them together (codegen-cpp
    compiles one shared library per graph: one compiler run instead of one per kernel).
    """

    name: str
    device_type: str  # "cpu" or "cuda"
    capabilities: BackendCapabilities

    def compile_kernels(self, kernels: Sequence[KernelSpec]) -> Sequence[CompiledKernel]: ...
