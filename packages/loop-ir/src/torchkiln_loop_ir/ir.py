"""The loop-level IR: buffers, layouts and the define-by-run bodies that compute them.

A value in the IR is one of:

- ``InputBuffer``: a graph input, read from memory.
- ``Pointwise``: an unrealized elementwise computation, ``inner_fn(index) -> ops value``. Its
  consumers call ``inner_fn`` inside their own bodies (inlining) unless it is realized.
- ``Reduction``: ``inner_fn(index, rindex) -> ops value`` reduced over ``reduction_ranges``.
- ``ComputedBuffer``: a realized Pointwise or Reduction, with a ``FixedLayout`` and the reason it
  was realized.
- ``ExternKernel``: an ATen kernel call (named extern or fallback); its outputs are ``Buffer``s.
- ``ReinterpretView``: a strided view of a realized buffer (no copy).

All indices are sympy expressions; a loader turns a per-dimension index into an ``ops`` value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .ops import ops

Index = Sequence[sympy.Expr]
Loader = Callable[[Index], Any]


def is_low_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype values of ``dtype`` are computed in: 16-bit floats are computed in float32."""
    return torch.float32 if is_low_precision(dtype) else dtype


def contiguous_strides(size: Sequence[sympy.Expr]) -> tuple[sympy.Expr, ...]:
    strides: list[sympy.Expr] = []
    running: sympy.Expr = sympy.Integer(1)
    for s in reversed(list(size)):
        strides.append(running)
        running = running * s
    return tuple(reversed(strides))


def product(values: Sequence[sympy.Expr]) -> sympy.Expr:
    out: sympy.Expr = sympy.Integer(1)
    for v in values:
        out = out * v
    return out


# Every analysis re-runs the IR's loaders (lowering, the scheduler once per candidate kernel,
# code generation), each building the same ``offset + sum(index * stride)`` in sympy again. It is
# a pure function of its arguments (the index values' types too: an int and a sympy Integer hash
# alike but build different sums), so it is kept.
@functools.lru_cache(maxsize=1 << 16)
def _flat_index(
    offset: sympy.Expr, size: tuple, stride: tuple, index: tuple, types: tuple
) -> sympy.Expr:
    out = offset
    for i, sz, st in zip(index, size, stride):
        if sz != 1:
            out = out + i * st
    return out


@dataclass(frozen=True)
class FixedLayout:
    """Where a tensor's elements live: ``offset + sum(index[d] * stride[d])`` in its storage."""

    device: torch.device
    dtype: torch.dtype
    size: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)  # noqa: RUF009 (an immutable constant)

    def index(self, index: Index) -> sympy.Expr:
        assert len(index) == len(self.size), (index, self.size)
        index = tuple(index)
        try:
            return _flat_index(
                self.offset, tuple(self.size), tuple(self.stride), index, tuple(map(type, index))
            )
        except TypeError:  # an index value that cannot be hashed: nothing to remember it by
            return _flat_index.__wrapped__(self.offset, self.size, self.stride, index, ())

    def numel(self) -> sympy.Expr:
        return product(self.size)

    def is_contiguous(self) -> bool:
        return self.offset == 0 and all(
            sz == 1 or st == cst
            for sz, st, cst in zip(self.size, self.stride, contiguous_strides(self.size))
        )

    def storage_extent(self) -> sympy.Expr:
        """Elements of storage the layout spans from its first element (0 when empty)."""
        if any(s == 0 for s in self.size):
            return sympy.Integer(0)
        return 1 + sum(((sz - 1) * st for sz, st in zip(self.size, self.stride)), sympy.Integer(0))

    def __str__(self) -> str:
        size = ", ".join(map(str, self.size))
        stride = ", ".join(map(str, self.stride))
        off = f", offset={self.offset}" if self.offset != 0 else ""
        return f"FixedLayout({self.device.type}, {str(self.dtype).replace('torch.', '')}, size=[{size}], stride=[{stride}]{off})"


def _load_from(name: str, layout: FixedLayout) -> Loader:
    dtype = layout.dtype

    def load(index: Index) -> Any:
        value = ops.load(name, layout.index(index))
        if is_low_precision(dtype):
            value = ops.to_dtype(value, torch.float32, dtype)
        return value

    return load


class IRNode:
    """What every IR value answers: sizes, dtype, device and a loader."""

    def get_size(self) -> tuple[sympy.Expr, ...]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def get_device(self) -> torch.device:
        raise NotImplementedError

    def make_loader(self) -> Loader:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Buffer(IRNode):
    """A named tensor in memory with a fixed layout (base of the realized kinds)."""

    name: str
    layout: FixedLayout

    def get_size(self):
        return self.layout.size

    def get_dtype(self):
        return self.layout.dtype

    def get_device(self):
        return self.layout.device

    def make_loader(self) -> Loader:
        return _load_from(self.name, self.layout)


@dataclass(frozen=True, eq=False)
class InputBuffer(Buffer):
    """A graph input (placeholder)."""


@dataclass(frozen=True, eq=False)
class Pointwise(IRNode):
    """``inner_fn(index)`` computes the element at ``index`` in ``compute_dtype(dtype)``."""

    inner_fn: Loader
    ranges: tuple[sympy.Expr, ...]
    dtype: torch.dtype
    device: torch.device

    def get_size(self):
        return self.ranges

    def get_dtype(self):
        return self.dtype

    def get_device(self):
        return self.device

    def make_loader(self) -> Loader:
        return self.inner_fn


@dataclass(frozen=True, eq=False)
class Reduction(IRNode):
    """``reduction_type`` of ``inner_fn(index, rindex)`` over ``reduction_ranges``, per ``index``."""

    inner_fn: Callable[[Index, Index], Any]
    ranges: tuple[sympy.Expr, ...]
    reduction_ranges: tuple[sympy.Expr, ...]
    reduction_type: str
    dtype: torch.dtype  # of the result
    src_dtype: torch.dtype  # of the reduced values
    device: torch.device
    # which part of a multi-output reduction this buffer holds: welford_reduce yields
    # (mean, m2, weight); sibling buffers with the same inner_fn share one pass once fused
    output_index: int | None = None
    # the second reduction of a split (``split_reductions.py``): the reduction it splits and the
    # name of the partials' buffer, which ``mixed_order.py`` may split again another way
    split_from: Reduction | None = None
    split_partial: str = ""
    # partials over ``row_chunks`` chunks of the rows of a row reduction over the same rows
    # (``mixed_order.py``): the scheduler may compute them inside that row reduction's kernel
    row_chunks: int = 0

    def get_size(self):
        return self.ranges

    def get_dtype(self):
        return self.dtype

    def get_device(self):
        return self.device


@dataclass(frozen=True, eq=False)
class Scatter(IRNode):
    """Writes into an existing buffer ``target``: for each ``index`` in ``ranges``,
    ``scatter_fn(index) -> (flat index into target, value)`` is stored with ``mode``
    (None overwrites, "atomic_add" accumulates). Never fused (it mutates ``target``)."""

    scatter_fn: Callable[[Index], tuple[sympy.Expr, Any]]
    ranges: tuple[sympy.Expr, ...]
    target: str
    mode: str | None
    dtype: torch.dtype
    device: torch.device

    def get_size(self):
        return self.ranges

    def get_dtype(self):
        return self.dtype

    def get_device(self):
        return self.device


@dataclass(frozen=True, eq=False)
class ComputedBuffer(Buffer):
    """A realized ``Pointwise`` or ``Reduction``; ``reason`` says why it lives in memory."""

    data: Pointwise | Reduction | Scatter = None  # type: ignore[assignment]
    reason: str = ""
    origin: str = ""

    @property
    def ranges(self) -> tuple[sympy.Expr, ...]:
        return self.data.ranges

    @property
    def reduction_ranges(self) -> tuple[sympy.Expr, ...]:
        return self.data.reduction_ranges if isinstance(self.data, Reduction) else ()

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)

    @property
    def is_scatter(self) -> bool:
        return isinstance(self.data, Scatter)

    @property
    def write_name(self) -> str:
        """The buffer this node's stores land in (a Scatter writes its target)."""
        return self.data.target if isinstance(self.data, Scatter) else self.name

    @functools.cached_property
    def loop_body(self) -> Any:
        """The store body recorded once (``loop_body.LoopBody``): what the scheduler, memory
        planning and the code generators read and replay instead of running the closure."""
        from .loop_body import LoopBody

        return LoopBody.of(self)

    def store_body(self) -> Callable[[Index, Index], None]:
        """``body(index, rindex)``: compute this buffer's element(s) and store them (the closure
        over the lowering's loaders; ``loop_body`` is its recording)."""
        name, layout, data = self.name, self.layout, self.data
        dtype = layout.dtype

        def _out(value):
            if is_low_precision(dtype):
                value = ops.to_dtype(value, dtype, torch.float32)
            return value

        body: Callable[..., None]  # a pointwise or scatter body may also be called with index alone
        if isinstance(data, Scatter):

            def body(index, rindex=()):
                where, value = data.scatter_fn(index)
                ops.store(data.target, where, _out(value), data.mode)

        elif isinstance(data, Pointwise):

            def body(index, rindex=()):
                ops.store(name, layout.index(index), _out(data.inner_fn(index)))

        else:

            def body(index, rindex):
                value = data.inner_fn(index, rindex)
                red_dtype = compute_dtype(data.dtype)
                if data.reduction_type in ("argmax", "argmin"):
                    red_dtype = torch.int64
                result = ops.reduction(
                    red_dtype, compute_dtype(data.src_dtype), data.reduction_type, value
                )
                if data.output_index is not None:
                    result = result[data.output_index]
                ops.store_reduction(name, layout.index(index), _out(result))

        return body


@dataclass(frozen=True, eq=False)
class ReinterpretView(IRNode):
    """Buffer ``base`` seen through another strided layout (a view: no copy)."""

    base: Buffer
    layout: FixedLayout

    @property
    def name(self) -> str:
        return self.base.name

    def get_size(self):
        return self.layout.size

    def get_dtype(self):
        return self.layout.dtype

    def get_device(self):
        return self.layout.device

    def make_loader(self) -> Loader:
        return _load_from(self.base.name, self.layout)


@dataclass(frozen=True, eq=False)
class ExternKernel:
    """One call of an ATen kernel; ``args``/``kwargs`` leaves are IR buffers, sympy sizes or constants.

    ``kind`` is "extern" for named extern kernels (mm, convolution, ...) and "fallback" for ops
    with no lowering. ``outputs`` are the buffers bound to the flattened result.
    """

    op: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: tuple[Buffer | None, ...]
    result_spec: Any  # pytree spec of the result
    kind: str = "extern"
    reason: str = ""
    origin: str = ""
    #: per flattened result: the size symbol a scalar result binds (``.item()``'s u0), or ""
    scalars: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class NamedView:
    """A view of a realized buffer that needs a name of its own (extern argument, graph output)."""

    name: str
    view: ReinterpretView


Realized = ComputedBuffer | ExternKernel | NamedView


@dataclass
class GraphIR:
    """The lowered graph: inputs, realized buffers in program order, and outputs."""

    inputs: list[InputBuffer]
    size_symbols: dict[sympy.Symbol, Any]  # symbol -> backend.SymbolSource
    nodes: list[Realized]
    outputs: list[Any]  # Buffer / ReinterpretView / constants
    fallbacks: list[str] = field(default_factory=list)
    extern_calls: list[str] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)  # every placeholder, tensors or not
    # buffers nobody reads, computed anyway for the errors their kernels check (a dead
    # out-of-range index_select raises in eager): the schedule treats them as outputs
    kept: list[str] = field(default_factory=list)
    # (output position, input name) pairs contract C2 allows to be written into the input
    # (``gm.meta["mutations_in_place"]``); the schedule decides which are (in_place.py)
    in_place: tuple[tuple[int, str], ...] = ()

    def __str__(self) -> str:
        from .printing import format_graph_ir

        return format_graph_ir(self)
