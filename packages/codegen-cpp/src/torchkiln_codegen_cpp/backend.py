"""``CppBackend``: the loop-IR ``Backend`` that builds all kernels of a graph into one library."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from torchkiln_loop_ir.backend import BackendCapabilities, KernelSpec

from ._prelude import PRELUDE
from .cache import build_library
from .kernel import GeneratedKernel, c_name, generate_kernel
from .options import CppOptions


class CppCompiledKernel:
    """One compiled kernel: call it with tensors for ``KernelSpec.args``, then ints for ``size_args``.

    Tensors are passed as ``tensor.data_ptr()``: index expressions are element offsets from there.
    """

    __slots__ = ("_fn", "_nargs", "_nbuf", "_take_oob", "library_path", "name", "path", "source")

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
        self._nbuf = gen.num_buffers
        self._nargs = gen.num_buffers + gen.num_sizes
        self._take_oob = lib.tk_take_oob_flag if gen.checks_bounds else None

    def __call__(self, *args: Any) -> None:
        if len(args) != self._nargs:
            raise TypeError(f"kernel {self.name} takes {self._nargs} arguments, got {len(args)}")
        nbuf = self._nbuf
        self._fn(*[a.data_ptr() for a in args[:nbuf]], *[int(s) for s in args[nbuf:]])
        if self._take_oob is not None and self._take_oob():
            raise IndexError(
                f"kernel {self.name}: an indirect index (gather/scatter/embedding) was out of bounds"
            )

    def __repr__(self) -> str:
        return f"<CppCompiledKernel {self.name} from {self.path}>"


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
        return PRELUDE + "\n" + "\n".join(g.source for g in gens), gens

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
