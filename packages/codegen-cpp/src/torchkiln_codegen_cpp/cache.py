"""Compiled shared libraries in the shared code cache (``torchkiln_loop_ir.codecache``).

Entry ``<cache root>/cpp/<key>/`` holds ``kernel.cpp`` and ``kernel.so``; the key covers the source,
the compiler flags, the compiler's version and, for flags that build for the host (``-march=native``),
the host CPU's features, so changing any of them rebuilds. The shared cache verifies the library
against the hash recorded at build time before it is dlopen'ed, rebuilds a damaged entry, writes
through an atomic rename and lets one process or thread build a key at a time.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
from pathlib import Path

from torchkiln_loop_ir.codecache import CodeCache, host_cpu_features

from ._vector_math import link_flags
from .errors import CodegenError
from .options import CppOptions

SOURCE_NAME = "kernel.cpp"
LIBRARY_NAME = "kernel.so"


def cpp_cache(options: CppOptions) -> CodeCache:
    """Where the C++ entries live: ``cpp/`` under options.cache_dir or the shared cache root."""
    return CodeCache.at("cpp", options.cache_dir)


@functools.lru_cache(maxsize=8)
def compiler_version(compiler: str) -> str:
    """The first line of ``<compiler> --version`` (probed once per process and compiler)."""
    try:
        proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise CodegenError(
            f"cannot run the C++ compiler {compiler!r}: {e}. Install g++ (with OpenMP) or pass "
            "CppOptions(compiler=...)"
        ) from e
    return proc.stdout.splitlines()[0] if proc.stdout else ""


def cache_key(source: str, options: CppOptions) -> str:
    # "native" flags make machine code for this CPU: the same source built elsewhere differs
    host = host_cpu_features() if any("native" in flag for flag in options.flags) else ""
    h = hashlib.sha256()
    for part in (
        source,
        "\0".join(options.flags),
        options.compiler,
        compiler_version(options.compiler),
        host,
    ):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()[:32]


def _run_compiler(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    """One compiler run (a separate function so tests can see whether the compiler ran)."""
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)


def build_library(source: str, options: CppOptions) -> tuple[Path, Path]:
    """Return (source path, library path) of ``source`` compiled; build it on a cache miss or
    when the cached library is not the one that was built (truncated, zeroed, replaced)."""
    cache = cpp_cache(options)
    key = cache_key(source, options)
    entry = cache.get_or_build(
        key, lambda tmp: _build(source, options, tmp, cache.directory / f"failed-{key}")
    )
    return entry / SOURCE_NAME, entry / LIBRARY_NAME


def _build(source: str, options: CppOptions, tmp: Path, failed: Path) -> None:
    (tmp / SOURCE_NAME).write_text(source)
    cmd = [options.compiler, *options.flags, SOURCE_NAME, "-o", LIBRARY_NAME]
    cmd += link_flags(source)  # after the source: linkers drop unused libraries listed first
    proc = _run_compiler(cmd, str(tmp))
    if proc.returncode != 0 or not (tmp / LIBRARY_NAME).is_file():
        # Keep the failing source where the user can open it.
        failed.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp / SOURCE_NAME, failed / SOURCE_NAME)
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-20:])
        raise CodegenError(
            f"the C++ compiler failed (exit code {proc.returncode}) on generated code; this is a "
            "torchkiln bug: please report it with the source file",
            source_path=str(failed / SOURCE_NAME),
            stderr_tail=tail,
        )
