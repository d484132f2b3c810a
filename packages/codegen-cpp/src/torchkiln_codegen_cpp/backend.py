"""``CppBackend``: the loop-IR ``Backend`` that builds all kernels of a graph into one library."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from typing import Any

from torchkiln_loop_ir.backend import BackendCapabilities, KernelSpec

from ._prelude import PRELUDE
from ._status import raise_status
from ._vector_math import declarations
from .cache import build_library
from .kernel import GeneratedKernel, c_name, generate_kernel
from .options import CppOptions


class CppCompiledKernel:
    """One compiled kernel: call it with tensors for ``KernelSpec.args``, then ints for ``size_args``.

    Tensors are passed as ``tensor.data_ptr()``: index expressions are element offsets from there.
    """

    __slots__ = (
        "_fn",
        "_launch",
        "_nargs",
        "_reports_status",
        "generated",
        "library_path",
        "name",
        "path",
        "source",
    )

    def __init__(
        self, name: str, gen: GeneratedKernel, path: str, library_path: str, lib: ctypes.CDLL
    ):
        self.name = name
        self.generated = gen  # kept so a persistent cache can save how to call it (export_kernels)
        self.source = gen.source
        self.path = path
        self.library_path = library_path
        fn = getattr(lib, gen.name)
        fn.argtypes = [ctypes.c_void_p] * gen.num_buffers + [ctypes.c_int64] * gen.num_sizes
        if gen.reports_status:
            fn.argtypes += [ctypes.POINTER(ctypes.c_int64)]
        fn.restype = None
        self._fn = fn
        self._nargs = gen.num_buffers + gen.num_sizes
        self._reports_status = gen.reports_status
        # The per-call path is a function of exactly this kernel's arity, made once: no slicing,
        # no list building, no len() check per call (a wrong arity is a TypeError from Python).
        self._launch = _make_launcher(self, gen.num_buffers, gen.num_sizes)

    # ``kernel(*args)`` finds ``__call__`` on the type; a property hands back the per-instance
    # launcher, which Python then calls directly (one frame, not a wrapper around it).
    @property
    def __call__(self) -> Callable[..., Any]:
        return self._launch

    def __repr__(self) -> str:
        return f"<CppCompiledKernel {self.name} from {self.path}>"


def _make_launcher(kernel: CppCompiledKernel, nbuf: int, nsize: int) -> Any:
    """``call(t0, .., s0, ..)``: the ctypes call with ``data_ptr()`` of each tensor, ints as is.

    Generated once per kernel for its exact arity. Every parameter defaults to a sentinel so a
    wrong count is our own TypeError (checking the last parameter and the overflow tuple only).
    """
    params = [f"t{i}" for i in range(nbuf)] + [f"s{i}" for i in range(nsize)]
    args = [f"t{i}.data_ptr()" for i in range(nbuf)] + [f"int(s{i})" for i in range(nsize)]
    n = len(params)
    last = params[-1] if params else None
    bad = "extra" + (f" or {last} is MISSING" if last else "")
    given = f"({', '.join(params)},)" if params else "()"
    if kernel._reports_status:
        # a fresh status word per call: concurrent calls never see each other's errors (passed
        # as the c_int64 itself, which ctypes converts for a POINTER argtype faster than byref)
        args.append("status")
    body = f"    if {bad}:\n        arity(len(extra) + sum(p is not MISSING for p in {given}))\n"
    if kernel._reports_status:
        body += "    status = int64(0)\n"
    body += f"    fn({', '.join(args)})\n"
    if kernel._reports_status:
        body += "    if status.value:\n        failed(status.value)\n"
    signature = ", ".join([f"{p}=MISSING" for p in params] + ["*extra"])
    src = f"def call({signature}):\n{body}"

    def arity(got: int) -> None:
        raise TypeError(f"kernel {kernel.name} takes {n} arguments, got {got}")

    scope = {
        "fn": kernel._fn,
        "int64": ctypes.c_int64,
        "failed": functools.partial(raise_status, kernel.name),
        "arity": arity,
        "MISSING": _MISSING,
    }
    # The source is built here from integers and fixed names only (no user text).
    exec(compile(src, f"<launcher of {kernel.name}>", "exec"), scope)  # noqa: S102
    return scope["call"]


_MISSING = object()


class CppBackend:
    """The C++/OpenMP code generator (implements ``torchkiln_loop_ir.backend.Backend``).

    ``compile_kernels`` writes every kernel of the call into one .cpp, builds it with one compiler
    run (or finds it in the on-disk cache) and loads it with ctypes.
    """

    name = "cpp"
    device_type = "cpu"
    # Several reduction stages per kernel: each "loop" stage is its own r-loop inside the x-loop.
    capabilities = BackendCapabilities(
        reduction_broadcast_reduction=True, max_reduction_stages=8, merge_dims=True
    )
    #: loop-ir may hand a kernel one memory as an input and an output (a mutated graph input
    #: written in place, loop-ir's in_place.py): each element is read before it is written
    supports_in_place_inputs = True

    def __init__(self, options: CppOptions | None = None):
        self.options = options or CppOptions()

    def library_source(self, kernels: Sequence[KernelSpec]) -> tuple[str, list[GeneratedKernel]]:
        """The whole .cpp for ``kernels`` and each kernel's generated function."""
        gens, used = [], set()
        for k in kernels:
            symbol = c_name(k.name)
            while symbol in used:
                symbol += "_"
            used.add(symbol)
            gens.append(generate_kernel(k, self.options, symbol=symbol))
        body = "\n".join(g.source for g in gens)
        prelude = PRELUDE + declarations(body, self.options.vector_math)
        return prelude + "\n" + body, gens

    def compile_kernels(self, kernels: Sequence[KernelSpec]) -> list[CppCompiledKernel]:
        if not kernels:
            return []
        source, gens = self.library_source(kernels)
        return self._load(source, [k.name for k in kernels], gens)

    def _load(
        self, source: str, names: Sequence[str], gens: Sequence[GeneratedKernel]
    ) -> list[CppCompiledKernel]:
        src_path, lib_path = build_library(source, self.options)
        lib = ctypes.CDLL(str(lib_path))
        return [
            CppCompiledKernel(name, g, str(src_path), str(lib_path), lib)
            for name, g in zip(names, gens)
        ]

    def export_kernels(self, kernels: Sequence[CppCompiledKernel]) -> dict[str, Any]:
        """Plain data from which ``load_kernels`` rebuilds ``kernels`` without generating code
        again: the source of each library they come from and each kernel's entry point."""
        paths = list(dict.fromkeys(k.path for k in kernels))
        sources = []
        for path in paths:
            with open(path) as f:
                sources.append(f.read())
        where = {path: i for i, path in enumerate(paths)}
        return {
            "libraries": sources,
            "kernels": [(where[k.path], k.name, k.generated) for k in kernels],
        }

    def load_kernels(
        self, exported: dict[str, Any], specs: Sequence[KernelSpec] = ()
    ) -> list[CppCompiledKernel]:
        """The kernels ``export_kernels`` saved, in order: each library comes from the build
        cache, and is built again from its saved source when the cache lost it."""
        by_library: dict[int, list[tuple[int, str, GeneratedKernel]]] = {}
        for position, (index, name, gen) in enumerate(exported["kernels"]):
            by_library.setdefault(index, []).append((position, name, gen))
        kernels: list[Any] = [None] * len(exported["kernels"])
        for index, entries in by_library.items():
            built = self._load(
                exported["libraries"][index], [e[1] for e in entries], [e[2] for e in entries]
            )
            for (position, _, _), kernel in zip(entries, built):
                kernels[position] = kernel
        return kernels
