"""The persistent graph cache: a torch-level FX graph -> its compiled runtime, across processes.

The kernel caches of the code generators only save the C++/Triton builds; aot-partition's
tracing and partitioning, lowering, scheduling and code generation still ran on every compile.
This cache sits above all of them: its key is a hash of everything that can change the compiled
result, and its value is what rebuilding the runtime needs (aot-partition's ``RuntimeMetadata``
and loop-ir's ``GraphArtifact`` of the forward and, when training, backward graph).

The key covers: the graph's code (and that of any sub-graph module it holds), the metadata of
every input and lifted parameter (type, shape, strides, storage offset, dtype, device, layout,
requires_grad, which inputs share storage), the global modes tracing reads (grad mode, inference
mode, autocast, default dtype, deterministic algorithms), the options (CompileOptions, the
LoopIROptions and the code generator's options actually used), the Python, torch and sympy
versions, every torchkiln package's version and a hash of its source files (so an edited checkout
never reuses an entry made by other code), and the host: machine, CPU flags, libc, and the C++
compiler's version (C++) or Triton's version, interpreter mode and GPU names (Triton).

A graph is not cached (status ``off: ...``) when its key cannot cover it: symbolic sizes (tracing
them adds shape guards a cache hit would not), ``call_module`` nodes or call targets outside
torch/operator/math/builtins (their code is not in the graph's text), non-tensor attributes,
node arguments other than plain values (numbers, strings, dtypes, devices, slices...),
non-strided tensors, or a code generator that cannot save its kernels.

Entries are written to a temporary file and moved into place with ``os.replace``, and carry a
SHA-256 of their payload: a truncated or garbled entry is reported as ``corrupt`` and compiled
again (and overwritten), never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx

FORMAT = 1  # bump when the entry layout changes
MAGIC = b"torchkiln-graph-cache\n"
_PACKAGES = (
    "torchkiln_guards",
    "torchkiln_dynamo_capture",
    "torchkiln_aot_partition",
    "torchkiln_loop_ir",
    "torchkiln_codegen_triton",
    "torchkiln_codegen_cpp",
    "torchkiln",
)
_KNOWN_MODULES = ("torch", "torchkiln", "operator", "_operator", "math", "builtins")


class NotCached(Exception):
    """This graph cannot be cached; the message says why."""


@dataclass(frozen=True)
class CacheEntry:
    format: int
    key: str
    runtime: Any  # torchkiln_aot_partition.RuntimeMetadata
    forward: Any  # torchkiln_loop_ir.GraphArtifact
    backward: Any = None  # GraphArtifact for training entries


def cache_root(options: Any) -> Path:
    """``options.cache_dir``, else ``$TORCHKILN_CACHE_DIR``, else ``~/.cache/torchkiln``."""
    base = options.cache_dir or os.environ.get("TORCHKILN_CACHE_DIR") or "~/.cache/torchkiln"
    return Path(base).expanduser() / "graphs"


# ---------------------------------------------------------------- the key


def _known_target(target: Any) -> bool:
    module = getattr(target, "__module__", None)
    if module is None:  # a method descriptor such as torch.Tensor.add
        module = getattr(getattr(target, "__objclass__", None), "__module__", None)
    return isinstance(module, str) and module.split(".")[0] in _KNOWN_MODULES


_PLAIN = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    slice,
    type(Ellipsis),
    fx.Node,
)


def _plain_constants(node: fx.Node) -> None:
    """Node arguments must print as what they are; an object whose repr hides its state (or is
    bound as a global of the generated code) is not keyed by the code's text."""
    stack = [node.args, node.kwargs]
    while stack:
        value = stack.pop()
        if isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, slice):
            stack.extend((value.start, value.stop, value.step))
        elif not isinstance(value, _PLAIN):
            raise NotCached(f"node {node.name} has a {type(value).__name__} argument")


def _tensor_meta(t: torch.Tensor) -> tuple[Any, ...]:
    if t.layout != torch.strided:
        raise NotCached(f"a {t.layout} tensor (only strided tensors are keyed)")
    if any(not isinstance(s, int) for s in (*t.shape, *t.stride(), t.storage_offset())):
        raise NotCached("symbolic sizes (tracing them adds shape guards a cache hit would not)")
    return (
        f"{type(t).__module__}.{type(t).__qualname__}",
        tuple(t.shape),
        tuple(t.stride()),
        t.storage_offset(),
        str(t.dtype),
        str(t.device),
        t.requires_grad,
        t.is_conj(),
        t.is_neg(),
        t.is_inference(),
    )


def _storage_id(t: torch.Tensor) -> Any:
    try:
        return (str(t.device), t.untyped_storage().data_ptr())
    except Exception:  # noqa: BLE001 - a tensor without real storage shares with nothing
        return None


def _value_meta(value: Any, storages: dict[Any, int], position: int) -> tuple[Any, ...]:
    if isinstance(value, torch.Tensor):
        sid = _storage_id(value)
        first = storages.setdefault(sid, position) if sid is not None else position
        return ("tensor", _tensor_meta(value), first)  # first: the earlier input it shares with
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise NotCached("a symbolic scalar input")
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", type(value).__name__, repr(value))
    raise NotCached(f"an input of type {type(value).__name__}")


def _graph_text(gm: fx.GraphModule, out: list[str], storages: dict[Any, int]) -> None:
    """The code of ``gm`` and the metadata of what its nodes name, appended to ``out``."""
    out.append(gm.code)
    for node in gm.graph.nodes:
        _plain_constants(node)
        if node.op == "call_module":
            raise NotCached(f"call_module {node.target} (module code is not in the graph text)")
        if node.op in ("call_function",) and not _known_target(node.target):
            raise NotCached(
                f"call target {getattr(node.target, '__qualname__', node.target)!r} "
                "is outside torch (its code is not in the graph text)"
            )
        if node.op == "placeholder":
            val = node.meta.get("example_value", node.meta.get("val"))
            if isinstance(val, torch.Tensor) and any(not isinstance(s, int) for s in val.shape):
                raise NotCached("symbolic sizes (tracing them adds shape guards a hit would not)")
        if node.op == "get_attr":
            value = gm
            for atom in str(node.target).split("."):
                value = getattr(value, atom)
            if isinstance(value, fx.GraphModule):
                out.append(f"submodule {node.target}:")
                _graph_text(value, out, storages)
            elif isinstance(value, torch.Tensor):
                out.append(f"attr {node.target}: {_value_meta(value, storages, -1 - len(out))}")
            else:
                raise NotCached(f"attribute {node.target} of type {type(value).__name__}")


def _global_modes() -> tuple[Any, ...]:
    autocast = []
    for device_type in ("cpu", "cuda"):
        try:
            autocast.append(
                (
                    device_type,
                    torch.is_autocast_enabled(device_type),
                    str(torch.get_autocast_dtype(device_type)),
                )
            )
        except Exception as error:  # noqa: BLE001 - an older torch spells this differently
            autocast.append((device_type, repr(error)))
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        tuple(autocast),
        str(torch.get_default_dtype()),
        torch.are_deterministic_algorithms_enabled(),
    )


@functools.cache
def _software() -> str:
    """Versions of Python, torch, sympy and every torchkiln package, plus a hash of the packages'
    source files: a checkout edited without a version bump still gets new keys. A package
    that is not installed (codegen-triton on a CPU-only install, torchkiln's "triton" extra
    off) is keyed as absent."""
    import importlib

    import sympy

    parts = [sys.version, torch.__version__, str(torch.version.git_version), sympy.__version__]
    digest = hashlib.sha256()
    for name in _PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError as error:  # not installed, or its own dependency (triton) is not
            parts.append(f"{name} absent ({error.name or error})")
            continue
        parts.append(f"{name}=={getattr(module, '__version__', '?')}")
        root = Path(module.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\1")
    parts.append(digest.hexdigest())
    return "\n".join(parts)


@functools.cache
def _cpu_features() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _host(codegen: Any, devices: set[str]) -> tuple[Any, ...]:
    """What the generated code or its build depends on besides the options: the machine."""
    host: list[Any] = [platform.machine(), platform.system(), platform.libc_ver()]
    name = getattr(codegen, "name", "")
    if name == "cpp":
        from torchkiln_codegen_cpp.cache import compiler_version

        host += [_cpu_features(), compiler_version(codegen.options.compiler)]
    elif name == "triton":
        from importlib.metadata import version

        host += [version("triton"), os.environ.get("TRITON_INTERPRET", "")]
        for device in sorted(devices):
            if device.startswith("cuda") and torch.cuda.is_available():
                index = torch.device(device).index or 0
                # the SM count sets how far loop-ir splits a reduction (split_reductions.py):
                # a MIG slice or a cut-down part may share a name with a larger one
                host.append(
                    (
                        device,
                        torch.cuda.get_device_name(index),
                        torch.cuda.get_device_capability(index),
                        torch.cuda.get_device_properties(index).multi_processor_count,
                    )
                )
    else:
        raise NotCached(f"code generator {name!r} is not known to the graph cache")
    return tuple(host)


def graph_key(
    gm: fx.GraphModule, example_inputs: list[Any], options: Any, codegen: Any, ir_options: Any
) -> str:
    """The cache key of compiling ``gm`` on ``example_inputs``; raises NotCached with a reason."""
    if not (hasattr(codegen, "export_kernels") and hasattr(codegen, "load_kernels")):
        raise NotCached(f"code generator {getattr(codegen, 'name', codegen)!r} cannot save kernels")
    storages: dict[Any, int] = {}
    text: list[str] = []
    inputs = [_value_meta(v, storages, i) for i, v in enumerate(example_inputs)]
    _graph_text(gm, text, storages)
    devices = {m[1][5] for m in inputs if m[0] == "tensor"}
    parts = [
        f"format {FORMAT}",
        *text,
        repr(inputs),
        repr(_global_modes()),
        repr(options),
        repr(ir_options),
        f"{type(codegen).__module__}.{type(codegen).__qualname__} {codegen.options!r}",
        _software(),
        repr(_host(codegen, devices)),
    ]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:40]


# ---------------------------------------------------------------- entries on disk


def _op(qualified: str) -> Any:
    """The ATen operator (overload or packet) named ``namespace.name[.overload]``."""
    namespace, name, *overload = qualified.split(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return getattr(packet, overload[0]) if overload else packet


def _higher_order(name: str) -> Any:
    """The control-flow operator ``torch.ops.higher_order.<name>`` (cond, while_loop, map_impl)."""
    return getattr(torch.ops.higher_order, name)


class _Pickler(pickle.Pickler):
    """Pickles operators by name: torch's OpOverload and HigherOrderOperator objects cannot be
    pickled themselves (a control-flow operator's subgraphs are GraphModules, which can)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return _op, (str(obj),)
        if isinstance(obj, torch._ops.HigherOrderOperator):
            return _higher_order, (obj.name(),)
        return NotImplemented


def _path(root: Path, key: str) -> Path:
    return root / f"{key}.bin"


def store(root: Path, entry: CacheEntry) -> Path:
    """Write ``entry`` atomically (a temporary file, then one ``os.replace``)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(entry)
    payload = buffer.getvalue()
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".bin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, _path(root, entry.key))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return _path(root, entry.key)


class CorruptEntry(Exception):
    """An entry that exists but cannot be trusted (truncated, garbled, another format)."""


def load(root: Path, key: str) -> CacheEntry | None:
    """The entry for ``key``; None when there is none; CorruptEntry when it is not usable."""
    try:
        data = _path(root, key).read_bytes()
    except FileNotFoundError:
        return None
    digest_end = len(MAGIC) + 32
    if not data.startswith(MAGIC) or len(data) < digest_end:
        raise CorruptEntry("not a torchkiln graph cache entry")
    payload = data[digest_end:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : digest_end]:
        raise CorruptEntry("checksum mismatch (truncated or modified)")
    try:
        entry = pickle.loads(payload)  # noqa: S301 - our own file, checked against its digest
    except Exception as error:  # noqa: BLE001 - e.g. a class that no longer exists
        raise CorruptEntry(f"cannot unpickle: {type(error).__name__}: {error}") from error
    if not isinstance(entry, CacheEntry) or entry.format != FORMAT or entry.key != key:
        raise CorruptEntry("an entry of another format or key")
    return entry
