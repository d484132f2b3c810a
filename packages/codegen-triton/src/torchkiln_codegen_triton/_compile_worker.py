"""The compile worker: a separate Python process that compiles kernels into Triton's on-disk cache.

Started by ``compile_pool`` as ``python -c BOOTSTRAP``, which loads this file by path (not the
torchkiln package: a worker needs only triton and torch, the latter to unpickle dtypes). It reads
jobs from stdin and answers on stdout, one length-prefixed pickle per message, until stdin closes.

A job names a kernel module file (the one the main process imported) and the ``warmup`` calls of
its first launches. The worker imports that file under the main process's module name and makes
the very same ``JITFunction.warmup`` calls, with Triton's driver replaced by a stand-in that only
reports the main process's GPU target: the worker then computes the cache key the main process
computes (same code, same source, specialization, options and cache-invalidating environment)
and ``triton.compile`` leaves the binary in the cache directory the main process reads. No CUDA
context is made here (``CUDA_VISIBLE_DEVICES`` is empty): ptxas needs no GPU.

Nothing the worker returns is used as a binary: only the cache hashes it compiled, so the main
process can tell whether its own lookups found them. This file must import nothing from
torchkiln and only the standard library at module level.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import sys
from typing import IO, Any

_LENGTH = struct.Struct("<Q")


def write_message(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def read_message(stream: IO[bytes]) -> Any:
    """The next message, or raise EOFError when the other side closed the pipe."""
    size = _LENGTH.unpack(_read_exactly(stream, _LENGTH.size))[0]
    return pickle.loads(_read_exactly(stream, size))


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("compile worker pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def invalidating_env() -> dict[str, str]:
    """Triton's cache-invalidating environment variables that are set (part of every cache key)."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:  # older Triton kept the list in Python
        from triton.runtime.cache import get_cache_invalidating_env_vars
    return dict(get_cache_invalidating_env_vars())


class TargetOnlyDriver:
    """Triton's active driver in a worker: a warmup asks it only for the current device, stream
    and target (``JITFunction.run`` with ``warmup=True``, Triton 3.4 to 3.9); anything else would
    need a GPU, and fails the job rather than touch one."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"a compile worker has no GPU driver (driver.{name})")


def _apply_context(cache_dir: str, env: dict[str, str], target: tuple[str, Any, int]) -> None:
    """Make this process's cache directory, cache-invalidating environment and target the main
    process's, as of this job (its environment may have changed since the worker started)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    os.environ["TRITON_CACHE_DIR"] = cache_dir
    for name in set(invalidating_env()) - set(env):
        del os.environ[name]
    os.environ.update(env)
    driver.set_active(TargetOnlyDriver(GPUTarget(*target)))


def compile_job(job: dict[str, Any]) -> list[str | None]:
    """Compile one kernel module's warmup calls; the cache hash of each compiled binary."""
    _apply_context(*job["context"])
    name, path = job["module"], job["path"]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load kernel module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as in the main process, where the module is registered
    try:
        spec.loader.exec_module(module)
        hashes = []
        for fn_name, args, kwargs in job["calls"]:
            fn = getattr(module, fn_name)
            compiled = fn.warmup(*args, **kwargs)
            hashes.append(getattr(compiled, "hash", None))
            # Triton keeps every jit function in a registry: drop the binary it holds
            getattr(fn, "device_caches", {}).clear()
        return hashes
    finally:
        del sys.modules[name]  # one module per job: nothing of it stays in a long-lived worker


def _import_compiler() -> None:
    """Import what every job needs now, before the first job arrives: the pool is started while
    the main process still generates code, and these imports take seconds (torch most)."""
    import torch  # noqa: F401 - the jobs' dtypes unpickle to torch's
    import triton.compiler  # noqa: F401 - and with it each backend's compiler (not its driver)


def serve() -> None:
    """Answer jobs until stdin closes: ("ok", hashes) or ("error", one line) for each."""
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a compiler prints goes to stderr, never into the replies
    os.environ["TRITON_INTERPRET"] = "0"  # @triton.jit reads it when the module is imported
    _import_compiler()
    while True:
        try:
            job = read_message(requests)
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", compile_job(job))
        except Exception as e:  # noqa: BLE001 - the main process compiles it again and reports
            reply = ("error", f"{type(e).__name__}: {e}".splitlines()[0][:300])
        write_message(replies, reply)


if __name__ == "__main__":
    serve()
