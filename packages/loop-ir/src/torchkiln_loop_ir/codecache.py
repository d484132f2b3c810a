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

The cache is bounded: each kind keeps at most ``cache_size_limit()`` bytes (``$TORCHKILN_CACHE_MAX_MB``,
else 2 GiB). A use touches an entry; after a build the least recently used entries beyond the
limit are removed (checked at a process's first build of a kind and every ``EVICT_EVERY`` builds
after, so the bound may be passed by that many entries meanwhile). Locks are one file per key
prefix (at most 256 per kind), so they do not grow with the cache.

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

from filelock import FileLock, Timeout

MANIFEST = "MANIFEST"
_TMP_PREFIX = "tmp-"
_TRASH_PREFIX = "trash-"
_LOCK_SUFFIX = ".lock"
DEFAULT_MAX_BYTES = 2 * 1024**3  # per kind: thousands of graphs' libraries
EVICT_EVERY = 16  # builds of one kind in one process between two size checks


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


def cache_size_limit() -> int:
    """The most bytes one kind of entry may hold: ``$TORCHKILN_CACHE_MAX_MB`` (mebibytes), else
    ``DEFAULT_MAX_BYTES``."""
    configured = os.environ.get("TORCHKILN_CACHE_MAX_MB")
    if not configured:
        return DEFAULT_MAX_BYTES
    try:
        megabytes = float(configured)
    except ValueError:
        raise ValueError(
            f"TORCHKILN_CACHE_MAX_MB={configured!r} is not a number of mebibytes"
        ) from None
    if megabytes < 0:
        raise ValueError(f"TORCHKILN_CACHE_MAX_MB={configured!r} is negative")
    return int(megabytes * 1024**2)


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


_builds: dict[
    str, int
] = {}  # cache directory -> builds in this process: a counter, not configuration
_builds_lock = threading.Lock()


@dataclass(frozen=True)
class CodeCache:
    """The entries of one kind under a cache root, at most ``max_bytes`` of them (None:
    ``cache_size_limit()``)."""

    directory: Path
    max_bytes: int | None = None

    @classmethod
    def at(
        cls,
        kind: str,
        configured: str | os.PathLike[str] | None = None,
        max_bytes: int | None = None,
    ) -> CodeCache:
        return cls(cache_root(configured) / kind, max_bytes)

    def _lock(self, key: str) -> FileLock:
        # one lock per key prefix, not per key: lock files must not grow with the cache (they
        # cannot be deleted safely while another process may hold them)
        return FileLock(str(self.directory / f"{key[:2]}{_LOCK_SUFFIX}"))

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

    def get_or_build(
        self, key: str, build: Callable[[Path], None], expect: dict[str, str] | None = None
    ) -> Path:
        """The directory of entry ``key``, verified (see ``verified``). On a miss or a damaged
        entry, ``build(tmp)`` writes the entry's files into ``tmp`` (a fresh directory next to the
        entries), under the entry's lock; the manifest is then recorded and the directory moved
        into place. An exception from ``build`` propagates and leaves no entry."""
        entry = self.entry_dir(key)
        if self.verified(key, expect) is not None:
            _touch(entry)
            return entry
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._lock(key):
            if self.verified(key, expect) is not None:  # built by whoever held the lock before us
                _touch(entry)
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
        self._after_build(key)
        return entry

    def _after_build(self, key: str) -> None:
        with _builds_lock:
            count = _builds.get(str(self.directory), 0)
            _builds[str(self.directory)] = count + 1
        if count % EVICT_EVERY == 0:
            self.evict(keep=key)

    def entries(self) -> list[tuple[float, int, str]]:
        """``(last use, bytes, name)`` of every entry, oldest first (failed builds' kept sources
        included; builds in progress and lock files are not entries)."""
        found = []
        try:
            children = list(os.scandir(self.directory))
        except OSError:
            return []
        for child in children:
            name = child.name
            if name.startswith((_TMP_PREFIX, _TRASH_PREFIX)) or name.endswith(_LOCK_SUFFIX):
                continue
            try:
                if not child.is_dir(follow_symlinks=False):
                    continue
                used = child.stat(follow_symlinks=False).st_mtime
                size = sum(
                    f.stat(follow_symlinks=False).st_size
                    for f in os.scandir(child.path)
                    if f.is_file(follow_symlinks=False)
                )
            except OSError:  # removed meanwhile by another process
                continue
            found.append((used, size, name))
        found.sort()
        return found

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove the least recently used entries until the kind holds at most ``max_bytes``;
        never ``keep`` (the entry just built) nor an entry whose lock another build holds.
        Returns the names removed."""
        limit = cache_size_limit() if self.max_bytes is None else self.max_bytes
        found = self.entries()
        total = sum(size for _, size, _ in found)
        removed = []
        for _, size, name in found:
            if total <= limit:
                break
            if name == keep:
                continue
            lock = self._lock(name[len("failed-") :] if name.startswith("failed-") else name)
            try:
                with lock.acquire(timeout=0):
                    self.discard(name)
            except Timeout:  # being built or checked right now: not the one to remove
                continue
            total -= size
            removed.append(name)
        return removed

    def discard(self, key: str) -> None:
        """Remove entry ``key`` if present: renamed aside first (one atomic step, so no reader
        sees a half-deleted entry), then deleted."""
        entry = self.entry_dir(key)
        if not entry.exists():
            return
        trash = Path(tempfile.mkdtemp(prefix=_TRASH_PREFIX, dir=self.directory))
        try:
            os.replace(entry, trash / key)
        except FileNotFoundError:  # another process removed it first
            pass
        finally:
            shutil.rmtree(trash, ignore_errors=True)


def _touch(entry: Path) -> None:
    """Mark ``entry`` used now: eviction removes the least recently used first."""
    try:
        os.utime(entry)
    except OSError:  # removed meanwhile: the caller's next check rebuilds it
        pass


_modules: dict[
    tuple[str, str], ModuleType
] = {}  # (path, sha256) -> module: a memo, not configuration
_modules_lock = threading.Lock()


def import_verified(
    path: Path, want: str, module_name: str, *, register: bool = False
) -> ModuleType:
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
            raise CorruptCacheEntry(
                f"{path} changed after it was verified (another process damaged it)"
            )
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


def source_module(
    cache: CodeCache, source: str, file_name: str, module_prefix: str, *, register: bool = False
) -> tuple[ModuleType, Path]:
    """Generated Python ``source`` as a module, through entry ``<sha256 of source>`` holding it as
    ``file_name`` (a real file: tracebacks, ``inspect`` and Triton read it). Returns (module, path)."""
    data = source.encode()
    want = digest(data)
    key = want[:32]
    path = (
        cache.get_or_build(key, lambda tmp: (tmp / file_name).write_bytes(data), {file_name: want})
        / file_name
    )
    try:
        module = import_verified(path, want, f"{module_prefix}{key}", register=register)
    except (
        CorruptCacheEntry,
        FileNotFoundError,
    ):  # damaged or evicted between the check and the read
        cache.discard(key)
        path = (
            cache.get_or_build(
                key, lambda tmp: (tmp / file_name).write_bytes(data), {file_name: want}
            )
            / file_name
        )
        module = import_verified(path, want, f"{module_prefix}{key}", register=register)
    return module, path


__all__ = [
    "DEFAULT_MAX_BYTES",
    "EVICT_EVERY",
    "MANIFEST",
    "CodeCache",
    "CorruptCacheEntry",
    "cache_root",
    "cache_size_limit",
    "digest",
    "host_cpu_features",
    "import_verified",
    "source_module",
    "write_atomic",
]
