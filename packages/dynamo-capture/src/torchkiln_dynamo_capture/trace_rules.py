"""What the user asked capture to do with a callable: run it eagerly (``disable``), put it in the
graph as one call (``allow_in_graph``), or answer ``is_compiling()`` with True.

The marks are attributes on the function object, so they need no registry: ours
(``_torchkiln_disable``, ``_torchkiln_allow_in_graph``) and the one ``torch.compiler.disable``
sets on the wrapper it returns (``_torchdynamo_disable``), so code written for torch.compile
behaves the same under torchkiln. ``torch.compiler.allow_in_graph`` records its functions only in
TorchDynamo's own registry, which capture does not read (TorchDynamo is what torchkiln rebuilds):
such a function is inlined instead, with the same results. ``allow_in_graph`` from here
(re-exported as ``torchkiln.allow_in_graph``) marks the function itself.

Capture also keeps torch.distributed's own machinery out of graphs by itself: a distributed
wrapper module's call runs in Python (``runs_in_python``, ``wrapped_module``), and methods of
objects that talk to other processes are never run at capture time (``talks_to_other_processes``).
Nor are calls that change the process's torch state (``changes_torch_state``: seeding or reading
random generators, streams and events, global defaults): run once while tracing, later calls would
silently skip them, so they break the graph and run in Python on every call.

Logging calls (``logging.Logger`` methods, ``logging.info`` and friends, transformers'
``logger.warning_once``, ``warnings.warn``) do not break the graph: like the functions TorchDynamo
lets reorder (``reorderable_logging_functions``), they run after the graph, in program order, with
the arguments they had (``is_reorderable_logging``).

The rest is capture's own policy for calls nobody marked, read by ``variables/calls.py``: torch's
callables go into the graph (``is_torch_callable``, ``makes_tensor``), the standard library runs
for real on known values (``is_stdlib``), other functions run at capture time on constants only
when that cannot differ from running them later (``pure_with_constants``), and modules that act
on the world (``IMPURE_MODULES``: output, clocks, files, processes) always break the graph.
"""

from __future__ import annotations

import array
import functools
import logging
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

_DISABLE_MARKS = ("_torchkiln_disable", "_torchdynamo_disable")


def is_disabled(fn: Any) -> bool:
    """Whether ``fn`` (or the function of a bound method) is marked to run eagerly."""
    fn = getattr(fn, "__func__", fn)
    return any(getattr(fn, mark, False) is True for mark in _DISABLE_MARKS)


def is_allowed_in_graph(fn: Any) -> bool:
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "_torchkiln_allow_in_graph", False) is True


def disable(fn: F | None = None, *, recursive: bool = True, reason: str | None = None) -> Any:
    """``fn`` never captured: a call of it from captured code breaks the graph and runs ``fn`` in
    Python, as ``torch.compiler.disable`` does (``recursive=False`` is treated as True: nothing
    ``fn`` calls is captured either). Usable as ``@disable`` or ``@disable(reason=...)``."""
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason)

    @functools.wraps(fn)
    def eager(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    eager._torchkiln_disable = True  # type: ignore[attr-defined]
    eager._torchkiln_disable_reason = reason  # type: ignore[attr-defined]
    return eager


def allow_in_graph(fn: F) -> F:
    """``fn`` goes into the graph as one call (its body is not inlined nor split by breaks); it
    must take and return tensors (and constants), and run under FakeTensor and make_fx."""
    fn._torchkiln_allow_in_graph = True  # type: ignore[attr-defined]
    return fn


#: functions that answer "is torch.compile tracing now?": inside capture, yes
IS_COMPILING = frozenset(
    f
    for f in (
        getattr(torch.compiler, "is_compiling", None),
        getattr(torch.compiler, "is_dynamo_compiling", None),
    )
    if f is not None
)


def marked_dynamic_dims(t: torch.Tensor) -> frozenset[int]:
    """Dims marked by TorchDynamo's ``mark_dynamic`` / ``maybe_mark_dynamic`` (attributes on the
    tensor, read without importing TorchDynamo) or by ``mark_dynamic`` here."""
    dims = set(getattr(t, "_dynamo_dynamic_indices", ()) or ())
    dims |= set(getattr(t, "_dynamo_weak_dynamic_indices", ()) or ())
    return frozenset(dims)


def marked_static_dims(t: torch.Tensor) -> frozenset[int]:
    return frozenset(getattr(t, "_dynamo_static_indices", ()) or ())


def mark_dynamic(t: torch.Tensor, dims: int | list[int] | tuple[int, ...]) -> None:
    """Make ``t``'s ``dims`` symbolic from the first capture on (torch's own attribute, so
    TorchDynamo's ``mark_dynamic`` and this are interchangeable)."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    current = set(getattr(t, "_dynamo_dynamic_indices", ()) or ())
    t._dynamo_dynamic_indices = current | {d % t.dim() for d in dims}  # type: ignore[attr-defined]


def mark_static(t: torch.Tensor, dims: int | list[int] | tuple[int, ...] | None = None) -> None:
    """Keep ``t``'s ``dims`` (all when None) static even when they change between calls."""
    chosen = range(t.dim()) if dims is None else [dims] if isinstance(dims, int) else list(dims)
    current = set(getattr(t, "_dynamo_static_indices", ()) or ())
    t._dynamo_static_indices = current | {d % t.dim() for d in chosen}  # type: ignore[attr-defined]


#: (module, class, attribute holding the wrapped module or None, why its call runs in Python).
#: DistributedDataParallel's forward tells the reducer a backward is coming (prepare_for_forward,
#: prepare_for_backward, bucket rebuilds): inlined, those C++ calls would run once at capture time
#: and never again, and gradients would silently go unreduced. FSDP's forward and FSDP2's hooks
#: all-gather parameters before and free them after. The wrapped module (or, for FSDP2, the
#: module's own forward) is plain computation: that part is captured.
_DISTRIBUTED_WRAPPERS = (
    (
        "torch.nn.parallel.distributed",
        "DistributedDataParallel",
        "module",
        "its forward prepares the gradient reducer for the backward",
    ),
    (
        "torch.distributed.fsdp.fully_sharded_data_parallel",
        "FullyShardedDataParallel",
        "_fsdp_wrapped_module",
        "its forward all-gathers and frees the parameters",
    ),
    (
        "torch.distributed.fsdp._fully_shard._fully_shard",
        "FSDPModule",
        None,
        "its forward hooks all-gather and free the parameters",
    ),
)


def _wrapper_entry(m):
    for modname, clsname, inner, why in _DISTRIBUTED_WRAPPERS:
        # only classes already imported: a module of that class exists only if its module was loaded
        cls = getattr(sys.modules.get(modname), clsname, None)
        if cls is not None and isinstance(m, cls):
            return inner, why
    return None


def runs_in_python(m) -> str | None:
    """Why calling module ``m`` must run in Python rather than be inlined (None: inline it)."""
    entry = _wrapper_entry(m)
    return entry[1] if entry is not None else None


#: modules of stateful objects that talk to other processes
_COMMUNICATION_MODULES = (
    "torch._C._distributed",
    "torch.distributed",
    "torch.nn.parallel.distributed",
)


def talks_to_other_processes(obj: Any) -> bool:
    """Whether ``obj`` is a stateful object of torch.distributed (a process group, a store, a work,
    DDP's reducer or logger, a DDP or FSDP module): its methods act each time they are called."""
    return (type(obj).__module__ or "").startswith(_COMMUNICATION_MODULES)


#: modules every function of which reads or changes the state of torch's random generators or of
#: the device (streams, events, caching allocator, CUDA graphs)
_STATEFUL_TORCH_MODULES = (
    "torch.random",
    "torch.cuda.random",
    "torch.cuda.streams",
    "torch.cuda.memory",
    "torch.cuda.graphs",
    "torch.mps",
    "torch.xpu.random",
)
#: functions of the ``torch`` and ``torch.cuda`` namespaces that act on process-wide state
_STATEFUL_TORCH_NAMES = frozenset(
    {
        "manual_seed",
        "manual_seed_all",
        "seed",
        "seed_all",
        "initial_seed",
        "get_rng_state",
        "get_rng_state_all",
        "set_rng_state",
        "set_rng_state_all",
        "synchronize",
        "set_device",
        "set_stream",
        "empty_cache",
        "set_default_dtype",
        "set_default_device",
        "set_default_tensor_type",
        "set_num_threads",
        "set_num_interop_threads",
        "use_deterministic_algorithms",
        "set_deterministic_debug_mode",
        "set_float32_matmul_precision",
        "set_printoptions",
        "set_flush_denormal",
        "set_warn_always",
    }
)


def changes_torch_state(fn: Any) -> bool:
    """Whether calling ``fn`` reads or changes torch's process-wide state: a random generator
    (``torch.manual_seed``, ``Generator.manual_seed``/``get_state``), a stream or event, or a global
    default. Such a call run once at capture time would be skipped by every later call."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, (torch.Generator, torch.Stream, torch.Event)):
        return True
    if owner is not None and (type(owner).__module__ or "").startswith(_STATEFUL_TORCH_MODULES):
        return True
    mod = getattr(fn, "__module__", None) or ""
    if mod.startswith(_STATEFUL_TORCH_MODULES):
        return True
    return mod.split(".")[0] == "torch" and getattr(fn, "__name__", "") in _STATEFUL_TORCH_NAMES


def wrapped_module(m):
    """The module whose forward a distributed wrapper calls (itself unwrapped), or None when ``m``
    is not a wrapper of another module (FSDP2 keeps the module and adds hooks to it)."""
    entry = _wrapper_entry(m)
    if entry is None or entry[0] is None:
        return None
    inner = m.__dict__["_modules"].get(entry[0])
    if not isinstance(inner, torch.nn.Module):
        return None
    return wrapped_module(inner) or inner


#: logger methods that only emit a record (return None): safe to run after the graph instead
LOGGING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"}
)


def is_reorderable_logging(fn: Any, owner: Any = None) -> bool:
    """Whether calling ``fn`` (bound to ``owner`` when given) only emits a log record or a warning,
    so that capture may run it after the graph rather than break the graph for it. Methods of a
    ``logging.Logger`` or ``LoggerAdapter`` named like its emitting methods or ``*_once``
    (transformers' ``warning_once``/``info_once``), the module functions ``logging.info`` etc.,
    and ``warnings.warn``."""
    if fn is warnings.warn:
        return True
    func = getattr(fn, "__func__", fn)
    owner = getattr(fn, "__self__", owner)
    name = getattr(func, "__name__", "")
    if isinstance(owner, (logging.Logger, logging.LoggerAdapter)):
        return name in LOGGING_METHODS or (
            name.endswith("_once") and name.split("_")[0] in LOGGING_METHODS
        )
    return owner is None and name in LOGGING_METHODS and getattr(logging, name, None) is func


# --- what capture runs, inlines or puts in the graph by itself -----------------------------------

try:
    from torch._library.custom_ops import CustomOpDef
except ImportError:  # torch without torch.library.custom_op

    class CustomOpDef:  # type: ignore[no-redef]
        """Stands in for torch.library.custom_op's class: nothing is an instance of it."""


#: torch Python code inlined rather than put in the graph: decorators wrapping a user function, and
#: parametrized weights
INLINE_TORCH_MODULES = (
    "torch.utils._contextlib",
    "torch.amp.autocast_mode",
    # a parametrized weight (weight_norm: wav2vec2's positional convolution) is a property whose
    # getter calls the parametrization modules on the original tensors
    "torch.nn.utils.parametrize",
)


#: recurrent ops whose CUDA kernel (cuDNN's) cannot be traced: ATen's composite views the
#: weights' storage as cuDNN's weight buffer with ``set_(storage)``, a value no FX graph holds
#: (every graph holding one failed its ATen trace and ran eagerly). On CUDA the call breaks the
#: graph, so the module runs eagerly with cuDNN and the rest compiles, as torch.compile breaks
#: at recurrent modules by default; on the CPU it stays in the graph (oneDNN's layer)
_RECURRENT_OPS = tuple(getattr(torch._VF, n) for n in ("lstm", "gru", "rnn_tanh", "rnn_relu"))
#: the devices on which ``_RECURRENT_OPS`` break the graph (a tuple a test may extend)
RECURRENT_EAGER_DEVICES: tuple[str, ...] = ("cuda",)


def runs_recurrent_eagerly(fn: Any, device: torch.device) -> bool:
    """Whether a call of ``fn`` on an input on ``device`` breaks the graph (``_RECURRENT_OPS``)."""
    return device.type in RECURRENT_EAGER_DEVICES and any(fn is op for op in _RECURRENT_OPS)


def is_torch_callable(fn: Any) -> bool:
    """Whether ``fn`` is torch's own (a Tensor method, a ``torch._C`` function, a ``torch.*``
    function): called on tensors, it goes into the graph."""
    mod = getattr(fn, "__module__", None) or ""
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)) and getattr(
        fn, "__objclass__", None
    ) in (torch.Tensor, torch._C.TensorBase):
        return True
    if getattr(fn, "__self__", None) is torch._C._VariableFunctions or mod.startswith("torch._C"):
        return True
    return mod == "torch" or mod.startswith("torch.")


def is_stdlib(fn: Any) -> bool:
    """A Python function of the standard library (functools' own excepted): run for real on
    known values, inlined otherwise."""
    mod = getattr(fn, "__module__", None) or ""
    return (
        isinstance(fn, (types.FunctionType, types.MethodType))
        and mod.split(".")[0] in sys.stdlib_module_names
        and mod != "functools"
    )


#: standard-library modules whose functions act on the world (output, clocks, randomness, files,
#: processes): never run at capture time nor inlined; a call breaks the graph and runs in Python
IMPURE_MODULES = frozenset(
    {
        "logging",
        "warnings",
        "os",
        "posix",
        "nt",
        "sys",
        "time",
        "random",
        "io",
        "_io",
        "subprocess",
        "shutil",
        "tempfile",
        "socket",
        "threading",
        "multiprocessing",
        "pathlib",
        "datetime",
        "uuid",
        "secrets",
        "pdb",
        "traceback",
        "signal",
        "select",
        "atexit",
        "gc",
        "faulthandler",
        "sched",
        "asyncio",
        "builtins.input",
    }
)
#: builtins that are not pure functions of their arguments
_IMPURE_BUILTINS = frozenset(
    {
        "print",
        "input",
        "open",
        "exec",
        "eval",
        "compile",
        "breakpoint",
        "exit",
        "quit",
        "help",
        "globals",
        "locals",
        "delattr",
        "__import__",
    }
)
#: modules whose C functions are pure functions of constant arguments (run at capture time)
_PURE_C_MODULES = frozenset(
    {
        "builtins",
        "math",
        "cmath",
        "operator",
        "_operator",
        "itertools",
        "functools",
        "_functools",
        "collections",
        "_collections",
        "string",
        "re",
        "_sre",
        "keyword",
        "numbers",
        "typing",
        "enum",
        "types",
        "abc",
        "_abc",
        "copy",
        "inspect",
        "struct",
        "_struct",
        "binascii",
        "zlib",
        "_bisect",
        "bisect",
        "unicodedata",
    }
)


def is_impure_module(modname: str | None) -> bool:
    """Whether functions of module ``modname`` act on the world (see ``IMPURE_MODULES``)."""
    if not modname:
        return False
    return modname.split(".")[0] in IMPURE_MODULES or modname.startswith(_IMPURE_SUBMODULES)


#: parts of otherwise pure libraries that draw random numbers (run once at capture time, every
#: call would get the first call's numbers)
_IMPURE_SUBMODULES = ("numpy.random",)


def pure_with_constants(fn: Any) -> bool:
    """Whether running ``fn`` at capture time on constant arguments is the same as running it later.

    Methods of objects are (``str.join``, ``dict.get``, ``mappingproxy.__len__``) unless the object
    belongs to a module that acts on the world (files, random generators); module-level C functions
    are only for modules known to be pure: any other C function is unknown code and breaks.
    """
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, type):
        return True
    if changes_torch_state(fn):
        return False
    if owner is not None and _holds_data(owner):
        # an array's method reads its elements, which no guard covers (a numpy array argument
        # is guarded by type): run at capture time, a.mean() was the first call's mean forever
        return False
    if owner is not None and not isinstance(owner, types.ModuleType):
        # torch.distributed's objects act on every call (an all-reduce, a reducer told a
        # backward is coming): run once at capture time, later calls would silently skip them
        return not is_impure_module(type(owner).__module__) and not talks_to_other_processes(owner)
    mod = getattr(fn, "__module__", None) or getattr(owner, "__name__", "") or ""
    if mod == "builtins":
        return getattr(fn, "__name__", "") not in _IMPURE_BUILTINS
    if not isinstance(fn, types.BuiltinFunctionType):
        return not is_impure_module(mod)
    top = mod.split(".")[0]
    return top in ("torch", "numpy", "sympy") or top in _PURE_C_MODULES


_DATA_BUFFERS = (bytearray, memoryview, array.array)


def _holds_data(obj: Any) -> bool:
    """A mutable buffer of elements: a numpy array or scalar (they expose ``__array_interface__``),
    a bytearray, memoryview or array.array."""
    return (
        isinstance(obj, _DATA_BUFFERS)
        or (type(obj).__module__ or "").split(".")[0] == "numpy"
        and hasattr(type(obj), "__array_interface__")
    )


_TENSOR_FACTORIES = {
    torch.ones,
    torch.zeros,
    torch.empty,
    torch.full,
    torch.arange,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.tensor,
    torch.eye,
    torch.linspace,
    torch.ones_like,
    torch.zeros_like,
    torch.as_tensor,
    torch.scalar_tensor,
    torch.randperm,
    torch.empty_like,
    torch.full_like,
    torch.tril_indices,
    torch.triu_indices,
}


def makes_tensor(fn: Any) -> bool:
    """A torch factory: it makes a tensor from no tensor (a graph call even on constants, never
    run at capture time: run once, it would be one constant tensor shared by every call, written
    in place by one call and read by the next, and a random one would repeat its numbers).
    Besides the usual factories, any ``torch.*`` builtin whose ATen operator of the same name
    returns only tensors (``empty_strided``, ``normal``, ``hann_window``, ...)."""
    return fn in _TENSOR_FACTORIES or _aten_returns_tensors(fn)


@functools.cache
def _aten_returns_tensors(fn: Any) -> bool:
    name = getattr(fn, "__name__", "")
    if (
        not isinstance(fn, types.BuiltinFunctionType)
        or getattr(torch, name, None) is not fn
        or not hasattr(torch.ops.aten, name)
    ):
        return False
    packet = getattr(torch.ops.aten, name)
    schemas = [getattr(packet, o)._schema for o in packet.overloads()]
    return bool(schemas) and all(
        s.returns and all(isinstance(r.type, torch.TensorType) for r in s.returns) for s in schemas
    )


__all__ = [
    "allow_in_graph",
    "disable",
    "is_allowed_in_graph",
    "is_disabled",
    "is_reorderable_logging",
    "mark_dynamic",
    "mark_static",
]
