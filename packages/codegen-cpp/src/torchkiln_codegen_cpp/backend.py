"""``CppBackend``: the loop-IR ``Backend`` that builds all kernels of a graph into one library."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from torchkiln_loop_ir.backend import BackendCapabilities, KernelSpec

from ._prelude import PRELUDE
from ._vector_math import declarations
from .cache import build_library
from .kernel import GeneratedKernel, c_name, generate_kernel
from .options import CppOptions


class CppCompiledKernel:
    """One compiled kernel: call it with tensors for ``KernelSpec.args``, then ints for ``size_args``.

    Tensors are passed as ``tensor.data_ptr()``: index expressions are element offsets from there.
    """

    __slots__ = ("_fn", "_launch", "_nargs", "_take_oob", "library_path", "name", "path", "source")

    def __init__(
        self, name: str, gen: GeneratedKernel, path: str, library_path: str, lib: ctypes.CDLL
    ):
        self.name = name
        self.source = gen.source
        self.path = path
        self.library_path = library_path
        fn = getattr(lib, gen.name)
        fn.argtypes = [ctypes.c_void_p] * gen.num_buffers + [ctypes.c_int64] * gen.num_sizes
        fn.restype = None
        self._fn = fn
        self._nargs = gen.num_buffers + gen.num_sizes
        self._take_oob = lib.tk_take_oob_flag if gen.checks_bounds else None
        # The per-call path is a function of exactly this kernel's arity, made once: no slicing,
        # no list building, no len() check per call (a wrong arity is a TypeError from Python).
        self._launch = _make_launcher(self, gen.num_buffers, gen.num_sizes)

    # ``kernel(*args)`` finds ``__call__`` on the type; a property hands back the per-instance
    # launcher, which Python then calls directly (one frame, not a wrapper around it).
    __call__ = property(lambda self: self._launch)

    def _oob(self, flag: int = 1) -> None:
        # the flag's bits (see the prelude): 2 an integer division by zero, 1 an index out of
        # bounds; the division error is eager's own exception (type and message)
        if flag & 2:
            raise RuntimeError("ZeroDivisionError")
        raise IndexError(
            f"kernel {self.name}: an indirect index (gather/scatter/embedding) was out of bounds"
        )

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
    body = (
        f"    if {bad}:\n        arity(len(extra) + sum(p is not MISSING for p in {given}))\n"
        f"    fn({', '.join(args)})\n"
    )
    if kernel._take_oob is not None:
        body += "    flag = take_oob()\n    if flag:\n        oob(flag)\n"
    signature = ", ".join([f"{p}=MISSING" for p in params] + ["*extra"])
    src = f"def call({signature}):\n{body}"

    def arity(got: int) -> None:
        raise TypeError(f"kernel {kernel.name} takes {n} arguments, got {got}")

    scope = {
        "fn": kernel._fn,
        "take_oob": kernel._take_oob,
        "oob": kernel._oob,
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
        reduction_broadcast_reduction=True, max_reduction_stages=8, indirect_store_atomic_add=True
    )

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
        prelude = PRELUDE + (declarations() if self.options.vector_math else "")
        return prelude + "\n" + "\n".join(g.source for g in gens), gens

    def compile_kernels(self, kernels: Sequence[KernelSpec]) -> list[CppCompiledKernel]:
        if not kernels:
            return []
        source, gens = self.library_source(kernels)
        src_path, lib_path = build_library(source, self.options)
        lib = ctypes.CDLL(str(lib_path))
        return [
            CppCompiledKernel(k.name, g, str(src_path), str(lib_path), lib)
            for k, g in zip(kernels, gens)
        ]
