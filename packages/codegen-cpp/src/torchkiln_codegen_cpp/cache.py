"""Content-addressed on-disk cache of compiled shared libraries.

``<cache root>/cpp/<hash>/kernel.cpp`` and ``kernel.so``, where the hash covers the source, the
compiler flags and the compiler's version, so changing any of them rebuilds. A library is built in
a private temporary directory and moved into place with one ``os.replace``: readers never see a
half-written library, and two processes building the same source both succeed (the loser's
rename fails on the non-empty target, and it uses the winner's files). A lock file per key makes a
second process wait for the first build instead of repeating it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ._vector_math import link_flags
from .errors import CodegenError
from .options import CppOptions

SOURCE_NAME = "kernel.cpp"
LIBRARY_NAME = "kernel.so"


def cache_root(options: CppOptions) -> Path:
    """Where the C++ cache lives: options.cache_dir, else $TORCHKILN_CACHE_DIR, else ~/.cache/torchkiln."""
    base = (
        options.cache_dir
        or os.environ.get("TORCHKILN_CACHE_DIR")
        or os.path.expanduser("~/.cache/torchkiln")
    )
    return Path(base) / "cpp"


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
    h = hashlib.sha256()
    for part in (
        source,
        "\0".join(options.flags),
        options.compiler,
        compiler_version(options.compiler),
    ):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()[:32]


def _run_compiler(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    """One compiler run (a separate function so tests can see whether the compiler ran)."""
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)


def build_library(source: str, options: CppOptions) -> tuple[Path, Path]:
    """Return (source path, library path) of ``source`` compiled; build it on a cache miss."""
    root = cache_root(options)
    final = root / cache_key(source, options)
    lib = final / LIBRARY_NAME
    if lib.is_file():
        return final / SOURCE_NAME, lib
    root.mkdir(parents=True, exist_ok=True)
    # Processes building the same source take turns, so the second one reuses the first's work
    # instead of compiling too; correctness never depends on the lock (the rename is atomic).
    with _build_lock(root / f"{final.name}.lock"):
        if lib.is_file():
            return final / SOURCE_NAME, lib
        _build(source, options, root, final)
    return final / SOURCE_NAME, lib


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, builds may overlap (still safe)
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _build(source: str, options: CppOptions, root: Path, final: Path) -> None:
    lib = final / LIBRARY_NAME
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=root))
    try:
        (tmp / SOURCE_NAME).write_text(source)
        cmd = [options.compiler, *options.flags, SOURCE_NAME, "-o", LIBRARY_NAME]
        cmd += link_flags(source)  # after the source: linkers drop unused libraries listed first
        proc = _run_compiler(cmd, str(tmp))
        if proc.returncode != 0 or not (tmp / LIBRARY_NAME).is_file():
            # Keep the failing source where the user can open it.
            failed = root / ("failed-" + final.name)
            failed.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / SOURCE_NAME, failed / SOURCE_NAME)
            tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-20:])
            raise CodegenError(
                f"the C++ compiler failed (exit code {proc.returncode}) on generated code; this is a "
                "torchkiln bug: please report it with the source file",
                source_path=str(failed / SOURCE_NAME),
                stderr_tail=tail,
            )
        try:
            os.replace(tmp, final)
        except OSError:
            if not lib.is_file():  # not a lost race: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
