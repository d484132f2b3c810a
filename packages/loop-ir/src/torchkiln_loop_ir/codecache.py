"""The on-disk code cache that the code generators and the wrapper share.

An entry is a directory ``<root>/<kind>/<key>/`` (kind: ``cpp``, ``triton``, ``wrappers``) holding
the entry's files and a ``MANIFEST`` that records the sha256 of each file. The files are written
into a private temporary directory, the manifest last, and the directory is moved into place with
one ``os.replace``, so no reader ever sees half an entry.

Every load verifies the files against the manifest first: a library truncated, zeroed or swapped
after it was written (a full disk, an interrupted copy, another tool) used to be dlopen'ed and
killed every later process with SIGBUS or SIGSEGV, and a garbage wrapper made every later process
fall back to eager. Now a bad entry is moved aside, deleted and rebuilt, and never loaded. Builds
of one key take turns through a lock file (``filelock``), so concurrent processes and threads
compile once.

Python sources are executed from the verified bytes (not through the import system's bytecode
cache, whose ``__pycache__`` files nothing verifies).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from filelock import FileLock

MANIFEST = "MANIFEST"
_TMP_PREFIX = "tmp-"
_TRASH_PREFIX = "trash-"


class CorruptCacheEntry(RuntimeError):
    """A cache entry changed between its verification and its use (another process damaged it)."""


def cache_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``configured`` (an options field), else ``$TORCHKILN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/torchkiln``, else ``~/.cache/torchkiln``."""
    base = configured or os.environ.get("TORCHKILN_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg, "torchkiln") if xdg else os.path.join("~", ".cache", "torchkiln")
    return Path(base).expanduser()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.cache
def host_cpu_features() -> str:
    """A digest of the host CPU's instruction-set features, for keys of code built for the host
    (``-march=native``): the same source built on another CPU is different machine code, and a
    cache directory can be shared (a home directory over NFS, a container image)."""
    parts = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                # x86 says "flags", ARM says "Features"; every core lists the same set
                if line.split(":")[0].strip() in ("flags", "Features", "model name", "CPU part"):
                    parts.append(line.strip())
                if not line.strip() and len(parts) > 2:  # the end of the first core's block
                    break
    except OSError:  # not Linux: the machine name is what we know
        pass
    return digest("\n".join(parts).encode())[:16]


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and one
    ``os.replace``: readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class CodeCache:
    """The entries of one kind under a cache root."""

    directory: Path

    @classmethod
    def at(cls, kind: str, configured: str | os.PathLike[str] | None = None) -> CodeCache:
        return cls(cache_root(configured) / kind)

    def entry_dir(self, key: str) -> Path:
        return self.directory / key

    def verified(self, key: str, expect: dict[str, str] | None = None) -> dict[str, str] | None:
        """``{file name: sha256}`` of entry ``key`` when every file matches its manifest (and the
        manifest holds ``expect``, hashes known in advance), else None (absent, or damaged: a
        missing manifest or file, a different hash)."""
        entry = self.entry_dir(key)
        try:
            recorded = json.loads((entry / MANIFEST).read_text())
            if not isinstance(recorded, dict) or not recorded:
                return None
            if expect and any(recorded.get(name) != want for name, want in expect.items()):
                return None
            for name, want in recorded.items():
                if digest((entry / name).read_bytes()) != want:
                    return None
        except (OSError, ValueError):
            return None
        return recorded

    def get_or_build(self, key: str, build: Callable[[Path], None],
                     expect: dict[str, str] | None = None) -> Path:
        """The directory of entry ``key``, verified (see ``verified``). On a miss or a damaged
        entry, ``build(tmp)`` writes the entry's files into ``tmp`` (a fresh directory next to the
        entries), under the entry's lock; the manifest is then recorded and the directory moved
        into place. An exception from ``build`` propagates and leaves no entry."""
        entry = self.entry_dir(key)
        if self.verified(key, expect) is not None:
            return entry
        self.directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.directory / f"{key}.lock")):
            if self.verified(key, expect) is not None:  # built by whoever held the lock before us
                return entry
            self.discard(key)
            tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=self.directory))
            try:
                build(tmp)
                files = sorted(p.name for p in tmp.iterdir() if p.is_file())
                manifest = {name: digest((tmp / name).read_bytes()) for name in files}
                write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
                os.replace(tmp, entry)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return entry

    def discard(self, key: str) -> None:
        """Remove entry ``key`` if present: renamed aside first (one atomic step, so no reader
        sees a half-deleted entry), then deleted."""
        entry = self.entry_dir(key)
        if not entry.exists():
            return
        trash = Path(tempfile.mkdtemp(prefix=_TRASH_PREFIX, dir=self.directory))
        try:
            os.replace(entry, trash / key)
        finally:
            shutil.rmtree(trash, ignore_errors=True)


_modules: dict[tuple[str, str], ModuleType] = {}  # (path, sha256) -> module: a memo, not configuration
_modules_lock = threading.Lock()


def import_verified(path: Path, want: str, module_name: str, *, register: bool = False) -> ModuleType:
    """Execute the Python file at ``path`` as module ``module_name``, once per process, after
    checking that its bytes have sha256 ``want`` (``CorruptCacheEntry`` if not). ``register`` puts
    the module in ``sys.modules`` (Triton's jit looks a kernel's module up there)."""
    key = (str(path), want)
    with _modules_lock:
        module = _modules.get(key)
        if module is not None:
            return module
        data = path.read_bytes()
        if digest(data) != want:
            raise CorruptCacheEntry(f"{path} changed after it was verified (another process damaged it)")
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        if register:
            sys.modules[module_name] = module
        # the verified bytes, compiled here: the import system would read the file again and
        # could use a stale or damaged __pycache__ file instead
        exec(compile(data, str(path), "exec"), module.__dict__)  # noqa: S102 - our own generated code
        _modules[key] = module
        return module


def source_module(cache: CodeCache, source: str, file_name: str, module_prefix: str,
                  *, register: bool = False) -> tuple[ModuleType, Path]:
    """Generated Python ``source`` as a module, through entry ``<sha256 of source>`` holding it as
    ``file_name`` (a real file: tracebacks, ``inspect`` and Triton read it). Returns (module, path)."""
    data = source.encode()
    want = digest(data)
    key = want[:32]
    path = cache.get_or_build(key, lambda tmp: (tmp / file_name).write_bytes(data), {file_name: want}) / file_name
    try:
        module = import_verified(path, want, f"{module_prefix}{key}", register=register)
    except CorruptCacheEntry:  # damaged between the check and the read: build it once more
        cache.discard(key)
        path = cache.get_or_build(key, lambda tmp: (tmp / file_name).write_bytes(data), {file_name: want}) / file_name
        module = import_verified(path, want, f"{module_prefix}{key}", register=register)
    return module, path


__all__ = [
    "MANIFEST",
    "CodeCache",
    "CorruptCacheEntry",
    "cache_root",
    "digest",
    "host_cpu_features",
    "import_verified",
    "source_module",
    "write_atomic",
]
