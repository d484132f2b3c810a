"""A pool of compile worker processes that fill Triton's on-disk cache (``_compile_worker.py``).

Triton's front end (Python AST to TTIR) holds the GIL, so compile threads barely overlap; worker
processes do. Each worker compiles a kernel for the main process's GPU target into the main
process's cache directory, so the main process's own ``warmup`` (or first launch) of that kernel
is a cache hit: a lookup of milliseconds instead of a compile.

The pool is one per process, started lazily (``shared_pool``) and reused by every graph. Workers
are fresh interpreters (``subprocess`` with exec, never a fork of a process that may hold a CUDA
context) running a small entry point, not the user's ``__main__`` (which ``multiprocessing``'s
spawn and forkserver would import again). A worker that dies or errs costs only its job: the main
process compiles that kernel itself, as before. A worker never decides what runs: the main
process uses a binary only when its own cache lookup, with its own key, finds it.
"""

from __future__ import annotations

import atexit
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, cast

from ._compile_worker import read_message, write_message

#: a graph with fewer distinct kernels than this does not start the pool (its start, a few
#: seconds of imports per worker, would cost more than it saves); a running pool takes any batch
MIN_JOBS_TO_START = 16

_WORKER_FILE = Path(__file__).with_name("_compile_worker.py")
# load the worker file by path: importing the torchkiln package would only slow a worker's start
_BOOTSTRAP = (
    "import sys, importlib.util as u\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
    "s = u.spec_from_file_location('torchkiln_compile_worker', sys.argv[1])\n"
    "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve()\n"
)


class WorkerDied(RuntimeError):
    """A compile worker's process ended (or its pipe broke) while it held a job."""


class Worker:
    """One worker process and the lock that gives one job at a time to it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, str(_WORKER_FILE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )

    def call(self, job: Any) -> Any:
        """The worker's reply to ``job``: ("ok", hashes) or ("error", message)."""
        with self.lock:
            try:
                write_message(cast(IO[bytes], self.process.stdin), job)
                return read_message(cast(IO[bytes], self.process.stdout))
            except (OSError, EOFError, ValueError) as e:  # ValueError: a closed pipe
                # its pipe closes before its process is reaped: wait for the exit, so that
                # ``alive`` (and the pool's "every worker died") sees it right away
                self.hang_up()
                self.reap(5.0)
                raise WorkerDied(f"compile worker {self.process.pid}: {e}") from e

    def alive(self) -> bool:
        return self.process.poll() is None

    def hang_up(self) -> None:
        """Close its pipes: the worker returns when it reads the end of its stdin."""
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass

    def reap(self, timeout: float) -> None:
        """Wait for it to return, killing one still busy after ``timeout`` seconds (a compile
        cut short leaves nothing in Triton's cache: its files are renamed into place whole)."""
        try:
            self.process.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def worker_env() -> dict[str, str]:
    """A worker's environment: this process's, compiling for real and seeing no GPU (it never
    needs one, and must not create a CUDA context by accident)."""
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class CompilePool:
    """``size`` worker processes, started now (their imports run while the caller goes on)."""

    def __init__(self, size: int) -> None:
        env = worker_env()
        self.owner = os.getpid()  # a forked child must not use (or close) its parent's workers
        self.workers: list[Worker] = []
        try:
            for _ in range(max(1, size)):
                self.workers.append(Worker(env))
        except OSError:
            self.close()
            raise

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.alive()]

    def run(self, jobs: Sequence[Any], parallel: int) -> Iterator[tuple[int, Any]]:
        """Run ``jobs`` on at most ``parallel`` workers; yield ``(index, reply)`` as each ends,
        reply None when no worker could answer it. Closing the iterator early stops handing out
        jobs and waits for those already running (a worker holds one job at a time)."""
        todo: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        for item in enumerate(jobs):
            todo.put(item)
        done: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        stop = threading.Event()

        def feed(worker: Worker) -> None:
            while not stop.is_set():
                try:
                    index, job = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((index, worker.call(job)))
                except WorkerDied:
                    done.put((index, None))
                    return  # the other feeders take the rest
                except Exception:  # noqa: BLE001 - e.g. a job that does not pickle: no answer
                    done.put((index, None))

        feeders = [
            threading.Thread(target=feed, args=(w,), name="torchkiln-compile-feed", daemon=True)
            for w in self.live()[: max(1, parallel)]
        ]
        for t in feeders:
            t.start()
        answered: set[int] = set()
        try:
            while len(answered) < len(jobs):
                try:
                    index, reply = done.get(timeout=0.05)
                except queue.Empty:
                    if any(t.is_alive() for t in feeders) or not done.empty():
                        continue
                    break  # every feeder ended (their workers died): the rest has no answer
                answered.add(index)
                _count(reply)
                yield index, reply
            for index in range(len(jobs)):
                if index not in answered:
                    _count(None)
                    yield index, None
        finally:
            stop.set()
            for t in feeders:
                t.join()

    def close(self) -> None:
        if os.getpid() != self.owner:
            return
        for w in self.workers:
            w.hang_up()
        deadline = time.monotonic() + 2.0
        for w in self.workers:
            w.reap(deadline - time.monotonic())


_lock = threading.Lock()
_pool: CompilePool | None = None
#: what the workers did in this process (read by benchmarks: a worker's errors are otherwise
#: silent, its kernel compiled again here): jobs answered "ok", "error" or not at all
#: ("no_answer"), the main process's lookups that found the worker's binary ("found") or not
#: ("differed"), and the last error message
stats: dict[str, Any] = {"ok": 0, "error": 0, "no_answer": 0, "found": 0, "differed": 0}


def _count(reply: Any) -> None:
    kind = "no_answer" if reply is None else reply[0]
    stats[kind] = stats.get(kind, 0) + 1
    if kind == "error":
        stats["last_error"] = reply[1]


_off: str | None = None  # why worker processes are not used in this process any more


def shared_pool(size: int) -> CompilePool | None:
    """This process's pool, started on first use with ``size`` workers; None once turned off
    (``turn_off``), when no worker can be started, or once every worker died."""
    global _pool
    with _lock:
        if _off is not None:
            return None
        if _pool is not None and _pool.owner != os.getpid():
            _pool = None  # inherited through a fork: this process starts its own
        if _pool is not None and not _pool.live():
            # something kills them (or they cannot start): do not start more for every graph
            _turn_off_locked("every compile worker died")
            return None
        if _pool is None:
            try:
                _pool = CompilePool(size)
            except OSError as e:
                _turn_off_locked(f"cannot start compile workers: {e}")
                return None
            atexit.register(_pool.close)
        return _pool


def pool_running() -> bool:
    return _pool is not None and _off is None and _pool.owner == os.getpid()


def turn_off(reason: str) -> None:
    """Stop using worker processes in this process (every precompile then uses threads)."""
    with _lock:
        _turn_off_locked(reason)


def _turn_off_locked(reason: str) -> None:
    global _pool, _off
    _off = reason
    if _pool is not None:
        _pool.close()
        _pool = None


def reason_off() -> str | None:
    return _off


def reset_for_tests() -> None:
    """Close the pool and forget a ``turn_off`` (tests start each case from a clean process state)."""
    global _pool, _off
    with _lock:
        if _pool is not None:
            _pool.close()
        _pool, _off = None, None
