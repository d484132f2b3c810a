"""User-written Triton kernels launched from a captured function: ``kernel[grid](*args)``.

torch.compile puts such a launch in the graph as a higher-order operator that is functionalized
(the tensors the kernel writes become results). Here the launch is one call of a torch.library
operator, ``torchkiln::triton_kernel_launch(entry, tensors, ints) -> Tensor[]``, so every later
stage treats it as any custom operator: aot-partition traces it with its fake implementation and
loop-ir runs it as a named extern call, while the ops before and after it still fuse.

The operator is functional. Its real implementation copies each tensor the kernel may write
(same sizes and strides, so stride arguments stay valid), launches the kernel on the copies and
returns them; capture then writes each result back into the argument with ``copy_``, which
aot-partition's functionalization turns into a plain value (or a write-back into a graph input
for a kernel that updates an input in place). An output buffer made in the graph just before the
launch (``torch.empty_like(x)`` and friends, not yet read, written or viewed) holds nothing worth
copying: its result is a new buffer of the same sizes and strides, not a copy (``fresh``). Which arguments the kernel writes comes from its
source (``written_parameters``: pointers reaching ``tl.store``/``tl.atomic_*``); when the source
says nothing certain, every tensor argument counts as written.

What is not a tensor or a size is fixed at capture time and kept, with the kernel and its grid,
in a process-wide table (``LAUNCHES``, TorchDynamo's "kernel side table"); the graph holds the
entry's index. Sizes that are symbolic stay graph values (``ints``), so one graph serves every
length. A grid given as a function of the launch's meta-parameters is called while capturing
(with the arguments as capture sees them), so closures over symbolic sizes stay symbolic; for a
``triton.autotune`` kernel it is called once per config and the launch picks the grid of the
config the autotuner chose. Other kernel wrappers (``triton.heuristics``, which computes
meta-parameters at launch time) break the graph: the launch runs in Python.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import types
from typing import Any

import torch

from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker, hashable
from .containers import DictVariable, ListVariable, TupleVariable
from .symbolic import SymNodeVariable
from .tensors import TensorVariable


@dataclasses.dataclass(frozen=True)
class TensorSlot:
    """The ``index``-th tensor of the launch operator's ``tensors``."""

    index: int


@dataclasses.dataclass(frozen=True)
class IntSlot:
    """The ``index``-th size of the launch operator's ``ints``."""

    index: int


@dataclasses.dataclass(frozen=True)
class Launch:
    """One captured launch: what the graph cannot hold (the kernel, constants, the grid)."""

    kernel: Any
    kwargs: dict  # parameter or launch option -> TensorSlot, IntSlot or constant
    grid: tuple | None  # a grid of slots and constants (None: per config, ``config_grids``)
    config_grids: tuple  # ((config meta-parameters as sorted items), grid), autotuned kernels
    written: tuple  # indices of the tensors the kernel may write
    fresh: frozenset = frozenset()  # of those, uninitialized buffers made in the graph: not copied


#: every launch captured in this process, by index (the graph holds the index)
LAUNCHES: list[Launch] = []
_OP: list[Any] = []


def is_triton_kernel(value: Any) -> bool:
    """A Triton kernel object (``@triton.jit``, the interpreter's, ``triton.autotune``'s)."""
    jit = sys.modules.get(
        "triton.runtime.jit"
    )  # never import triton for a program that does not use it
    return jit is not None and isinstance(value, jit.KernelInterface)


def _python_function(kernel: Any) -> types.FunctionType | None:
    fn = kernel
    for _ in range(8):  # autotune(jit(f)): follow the wrappers down to the user's function
        if isinstance(fn, types.FunctionType):
            return fn
        fn = getattr(fn, "fn", None)
    return None


def _autotuner_configs(kernel: Any) -> list | None:
    at = sys.modules.get("triton.runtime.autotuner")
    if at is not None and isinstance(kernel, at.Autotuner):
        return list(kernel.configs)
    return None


def _supported(kernel: Any) -> bool:
    at = sys.modules.get("triton.runtime.autotuner")
    inner = getattr(kernel, "fn", None) if _autotuner_configs(kernel) is not None else kernel
    if at is not None and isinstance(inner, (at.Autotuner, at.Heuristics)):
        return False  # stacked wrappers compute meta-parameters at launch time
    return type(inner).__name__ in ("JITFunction", "InterpretedFunction")


# -- which parameters the kernel writes ---------------------------------------------------------

_WRITERS = frozenset(
    {
        "store",
        "atomic_add",
        "atomic_cas",
        "atomic_xchg",
        "atomic_max",
        "atomic_min",
        "atomic_and",
        "atomic_or",
        "atomic_xor",
    }
)
#: triton.language calls that only read or compute: a pointer passed to them is not written
_READERS = frozenset(
    {
        "load",
        "arange",
        "program_id",
        "num_programs",
        "multiple_of",
        "max_contiguous",
        "cdiv",
        "zeros",
        "full",
        "where",
        "dot",
        "sum",
        "max",
        "min",
        "exp",
        "log",
        "sqrt",
        "broadcast_to",
        "reshape",
        "view",
        "static_assert",
        "device_assert",
        "cast",
        "maximum",
        "minimum",
        "abs",
        "sigmoid",
        "softmax",
        "zeros_like",
        "split",
        "expand_dims",
        "trans",
        "permute",
        "advance",
        "static_print",
        "device_print",
    }
)


def written_parameters(fn: types.FunctionType) -> frozenset[str] | None:
    """The parameters of a kernel whose memory it may write: a pointer parameter reaching the
    first argument of ``tl.store``/``tl.atomic_*`` through assignments (``p = out_ptr + offs``),
    or passed to a call the analysis does not know (another ``@triton.jit`` function, inline
    assembly). None when the source cannot be read: every tensor counts as written."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = tree.body[0]
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]
    # taint: which parameters each local name may point into, to a fixed point over assignments
    taint: dict[str, set[str]] = {p: {p} for p in params}

    def reached(node: ast.AST) -> set[str]:
        out: set[str] = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                out |= taint.get(n.id, set())
        return out

    def targets(node: ast.AST) -> list[str]:
        return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]

    changed = True
    while changed:
        changed = False
        for n in ast.walk(func):
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(n, ast.Assign):
                pairs = [(t, n.value) for t in n.targets]
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                pairs = [(n.target, n.value)]
            elif isinstance(n, ast.NamedExpr):
                pairs = [(n.target, n.value)]
            elif isinstance(n, ast.For):
                pairs = [(n.target, n.iter)]
            for target, value in pairs:
                src = reached(value)
                for name in targets(target):
                    before = taint.setdefault(name, set())
                    if not src <= before:
                        before |= src
                        changed = True
    written: set[str] = set()
    for n in ast.walk(func):
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
        operands = [*n.args, *(k.value for k in n.keywords)]
        if name in _WRITERS:
            pointer = (
                n.args[0]
                if n.args
                else next((k.value for k in n.keywords if k.arg == "pointer"), None)
            )
            if pointer is not None:
                written |= reached(pointer)
        elif name not in _READERS and not (
            name == "make_block_ptr" or name == "make_tensor_descriptor"
        ):
            for a in operands:  # an unknown callee may write through any pointer it receives
                written |= reached(a)
    return frozenset(written & set(params))


# -- the operator -------------------------------------------------------------------------------


def launch_operator() -> Any:
    """``torch.ops.torchkiln.triton_kernel_launch``, registered on first use."""
    if _OP:
        return _OP[0]

    @torch.library.custom_op("torchkiln::triton_kernel_launch", mutates_args=())
    def triton_kernel_launch(
        entry: int, tensors: list[torch.Tensor], ints: list[int]
    ) -> list[torch.Tensor]:
        return run_launch(LAUNCHES[entry], tensors, ints)

    @triton_kernel_launch.register_fake
    def _fake(entry, tensors, ints):
        return [
            torch.empty_strided(
                tensors[i].size(),
                tensors[i].stride(),
                dtype=tensors[i].dtype,
                device=tensors[i].device,
            )
            for i in LAUNCHES[entry].written
        ]

    _OP.append(torch.ops.torchkiln.triton_kernel_launch.default)
    return _OP[0]


def run_launch(launch: Launch, tensors: list[torch.Tensor], ints: list[int]) -> list[torch.Tensor]:
    """Launch on copies of the tensors the kernel writes; the copies are the results. A fresh
    buffer's contents are undefined (as in eager), so its result is allocated, not copied."""
    copies: dict[int, torch.Tensor] = {}
    for i in launch.written:
        t = tensors[i]
        copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
        copies[i] = copy if i in launch.fresh else copy.copy_(t)

    def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.data_ptr() == b.data_ptr() and a.size() == b.size() and a.stride() == b.stride()

    def tensor(i: int) -> torch.Tensor:
        if i in copies:
            return copies[i]
        # one buffer passed twice (read here, written there): the kernel saw one buffer in eager
        return next(
            (c for j, c in copies.items() if same_memory(tensors[j], tensors[i])), tensors[i]
        )

    def value(v: Any) -> Any:
        if isinstance(v, TensorSlot):
            return tensor(v.index)
        if isinstance(v, IntSlot):
            return int(ints[v.index])
        return v

    kwargs = {k: value(v) for k, v in launch.kwargs.items()}
    if launch.grid is not None:
        grid: Any = tuple(value(g) for g in launch.grid)
    else:
        by_config = {key: tuple(value(g) for g in g_) for key, g_ in launch.config_grids}

        def grid(meta: dict) -> tuple:
            for key, g in by_config.items():
                if all(meta.get(k) == v for k, v in key):
                    return g
            raise RuntimeError("triton_kernel_launch: no grid for the autotuner's chosen config")

    launch.kernel[grid](**kwargs)
    return [copies[i] for i in launch.written]


# -- capture ------------------------------------------------------------------------------------

#: graph calls that make a tensor with undefined contents
_EMPTY_MAKERS = frozenset(
    {
        torch.empty,
        torch.empty_like,
        torch.empty_strided,
        torch.empty_permuted,
        "new_empty",
        "new_empty_strided",
    }
)


def is_fresh_buffer(t: TensorVariable) -> bool:
    """``t`` was made by ``torch.empty*`` / ``new_empty*`` in this graph and nothing has used it
    since (no read, in-place write or view: its node has no users), so the launch can write a new
    buffer instead of a copy of it. Anything else (graph inputs, computed tensors, views, a
    buffer filled or launched on before) is copied: its contents may be read."""
    node = t.node
    return (
        node.op in ("call_function", "call_method")
        and not node.users
        and hashable(node.target)
        and node.target in _EMPTY_MAKERS
    )


class TritonKernelVariable(VariableTracker):
    """A Triton kernel known at capture time; ``kernel[grid]`` gives a ``TritonLaunchVariable``."""

    def __init__(self, kernel: Any, source=None):
        self.kernel = kernel
        self.source = source

    def python_type(self) -> type:
        return type(self.kernel)

    def real_value(self) -> Any:
        return self.kernel

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.kernel

    def var_getattr(self, tx, name: str) -> VariableTracker:
        raise Unsupported(
            f"attribute {name!r} of a Triton kernel", "launch it as kernel[grid](...)"
        )

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return TritonLaunchVariable(self.kernel, args[0])
        if name == "run" and "grid" in kwargs:
            kwargs = dict(kwargs)
            grid = kwargs.pop("grid")
            warmup = kwargs.pop("warmup", ConstantVariable(False))
            if warmup.is_python_constant() and not warmup.as_python_constant():
                return TritonLaunchVariable(self.kernel, grid).call(tx, args, kwargs)
        raise Unsupported(f"calling {name!r} of a Triton kernel", "launch it as kernel[grid](...)")

    def reconstruct(self, r) -> str:
        return r.ns.ref(self.kernel)

    def call(self, tx, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(
            "calling a Triton kernel without a grid (a device function call)",
            "launch it as kernel[grid](...)",
        )


class TritonLaunchVariable(VariableTracker):
    """``kernel[grid]``: calling it puts the launch in the graph."""

    def __init__(self, kernel: Any, grid: VariableTracker):
        self.kernel = kernel
        self.grid = grid

    def reconstruct(self, r) -> str:
        # a launch that breaks the graph runs in Python: the kernel indexed by its grid again
        return f"{r.ns.ref(self.kernel)}[{r.expr(self.grid)}]"

    def call(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return capture_launch(tx, self.kernel, self.grid, args, kwargs)


def capture_launch(
    tx, kernel: Any, grid: VariableTracker, args: list, kwargs: dict
) -> VariableTracker:
    name = getattr(_python_function(kernel), "__qualname__", repr(kernel))
    fn = _python_function(kernel)
    if fn is None or not _supported(kernel):
        raise Unsupported(
            f"launching Triton kernel {name} wrapped in {type(kernel).__name__}",
            "the launch runs in Python between two graphs",
        )
    params = list(inspect.signature(fn).parameters)
    options = {k: v for k, v in kwargs.items() if k not in params}  # num_warps, num_stages, ...
    try:
        bound = inspect.signature(fn).bind_partial(
            *args, **{k: v for k, v in kwargs.items() if k in params}
        )
    except TypeError as e:
        raise Unsupported(f"launching Triton kernel {name}: {e}") from e
    tensors: list[TensorVariable] = []
    ints: list[SymNodeVariable] = []

    def slot(v: VariableTracker, what: str) -> Any:
        if isinstance(v, TensorVariable):
            for i, t in enumerate(tensors):
                if t is v:
                    return TensorSlot(i)
            tensors.append(v)
            return TensorSlot(len(tensors) - 1)
        if isinstance(v, SymNodeVariable) and v.python_type() is int and not v.unbacked:
            ints.append(v)
            return IntSlot(len(ints) - 1)
        if v.is_python_constant():
            return v.as_python_constant()
        raise Unsupported(
            f"launching Triton kernel {name}: {what} is a {type(v).__name__}",
            "the launch runs in Python between two graphs",
        )

    values = {p: slot(v, f"argument {p!r}") for p, v in bound.arguments.items()}
    for k, v in options.items():
        if not v.is_python_constant():
            raise Unsupported(
                f"launching Triton kernel {name}: launch option {k!r} not known at capture time"
            )
        values[k] = v.as_python_constant()
    meta = dict(bound.arguments)
    for p, param in inspect.signature(fn).parameters.items():
        if p not in meta and param.default is not inspect.Parameter.empty:
            meta[p] = ConstantVariable(param.default)

    def grid_of(extra: dict) -> tuple:
        g = grid
        if not isinstance(g, (TupleVariable, ListVariable)) and not (
            g.is_python_constant() and isinstance(g.as_python_constant(), (tuple, list, int))
        ):
            items = dict(meta)
            items.update({k: ConstantVariable(v) for k, v in extra.items()})
            g = tx.call_function(g, [DictVariable(items)], {})
        if isinstance(g, (TupleVariable, ListVariable)):
            parts = g.items
        else:
            value = g.as_python_constant()
            parts = [
                ConstantVariable(x)
                for x in (value if isinstance(value, (tuple, list)) else (value,))
            ]
        return tuple(slot(p, "a grid size") for p in parts)

    configs = _autotuner_configs(kernel)
    if configs is None:
        plain_grid, config_grids = grid_of({}), ()
    else:
        plain_grid = None
        config_grids = tuple((tuple(sorted(c.kwargs.items())), grid_of(c.kwargs)) for c in configs)
    params_written = written_parameters(fn)
    written = tuple(
        sorted(
            {
                v.index
                for p, v in values.items()
                if isinstance(v, TensorSlot) and (params_written is None or p in params_written)
            }
        )
    )
    fresh = frozenset(i for i in written if is_fresh_buffer(tensors[i]))
    LAUNCHES.append(Launch(kernel, values, plain_grid, config_grids, written, fresh))
    entry = len(LAUNCHES) - 1
    # the kernel is invisible to autograd in eager: its operands are passed detached
    operands = [t.call_method(tx, "detach", [], {}) if t.fake.requires_grad else t for t in tensors]
    result = tx.out.call_tensor_op(
        tx,
        "call_function",
        launch_operator(),
        [ConstantVariable(entry), ListVariable(operands), ListVariable(list(ints))],
        {},
    )
    results = tx.unpack(result) if written else []
    for i, new in zip(written, results):
        # the functional result written back: functionalization keeps the value, or writes a
        # graph input back after the graph (a kernel that updates its input in place)
        tensors[i].call_method(tx, "copy_", [new], {})
    return ConstantVariable(None)
