"""Options of the C++ backend: one frozen object passed down, never mutated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CppOptions:
    """How kernels are generated and built.

    ``flags`` go to the compiler verbatim and are part of the cache key. No ``-ffast-math``:
    kernels must keep IEEE NaN/inf semantics to match eager PyTorch. ``-ffp-contract=off``: g++
    fuses ``a + 2 * b`` into one fma in C++ by default, which rounds (and overflows) once where
    eager's two ops round twice (-inf + 2 * FLT_MAX is -inf fused, nan in eager).
    ``-fno-trapping-math``: values are unchanged (IEEE NaN/inf/rounding as before; only the
    floating-point exception flags, which nothing reads, may differ), but g++ may then compute
    float ops under a mask unconditionally, so masked loops (cat, padding, upsampling indices)
    vectorize (unet's cat + upsample kernel: 90 -> 29 us, after _splits.py's 242 -> 90 us).
    ``parallel_threshold``: loop nests with fewer elements (x-numel * r-numel) run serially, since
    waking the OpenMP team costs more than it saves on tiny kernels.
    ``x_lanes``: a reduction vectorized across x (its r-loops strided, neighbouring x adjacent)
    runs its innermost x-loop as blocks of this many x, with each r-loop iteration's lane loop
    innermost (``_lanes.py``): g++ vectorized the single x-loop around whole r-loops only when
    they neither stored nor called libmvec (GELU's backward with its bias gradient, 1024 x 256:
    4.4-5.5 -> 0.41-0.45 ms, ``benchmarks/cpu_microbench.py``). 0 or 1 keeps the single loop.
    ``vector_math``: let ``omp simd`` loops call glibc libmvec's SIMD variants of float32 ``exp``,
    ``log``, ``tanh``, ``erf``, ... (a few ULP from scalar libm, same NaN/inf/overflow behaviour;
    x86-64 glibc >= 2.35 and AVX2 only, ignored elsewhere), every evaluation of a function,
    scalar tails included, through one variant (``_vector_math.py``: an element's value does
    not depend on where it is computed). False: scalar libm calls, as in 0.1.1.
    ``owned_scatter``: an accumulating scatter whose destination index keeps its innermost
    x-variable's values apart (``x2 + 128*i`` for ``x2 < 128``: an embedding's gradient rows)
    runs without atomics, each thread owning a range of that variable (``_owned.py``): BERT's
    token-type embedding gradient sent every token's row into 2 rows with one ``omp atomic``
    each (2.45 ms of a 15 ms training step, small config at batch 32). False: atomics.
    ``cache_dir``: None means the shared cache root (``torchkiln_loop_ir.codecache.cache_root``:
    ``$TORCHKILN_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchkiln``, else ``~/.cache/torchkiln``).
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
        "-ffp-contract=off",
        "-fno-trapping-math",
        "-w",
    )
    parallel_threshold: int = 16384
    x_lanes: int = 16
    simd: bool = True
    bounds_check: bool = True
    vector_math: bool = True
    owned_scatter: bool = True
    cache_dir: str | None = None
