"""Options of the C++ backend: one frozen object passed down, never mutated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CppOptions:
    """How kernels are generated and built.

    ``flags`` go to the compiler verbatim and are part of the cache key. No ``-ffast-math``:
    kernels must keep IEEE NaN/inf semantics to match eager PyTorch.
    ``parallel_threshold``: loop nests with fewer elements (x-numel * r-numel) run serially, since
    waking the OpenMP team costs more than it saves on tiny kernels.
    ``cache_dir``: None means ``$TORCHKILN_CACHE_DIR`` or ``~/.cache/torchkiln``.
    """

    compiler: str = "g++"
    flags: tuple[str, ...] = (
        "-O3",
        "-march=native",
        "-fopenmp",
        "-fPIC",
        "-shared",
        "-std=c++17",
        "-fno-strict-aliasing",
        "-w",
    )
    parallel_threshold: int = 16384
    simd: bool = True
    bounds_check: bool = True
    cache_dir: str | None = None
