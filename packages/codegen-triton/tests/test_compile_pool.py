"""Compile worker processes (compile_pool.py, _compile_worker.py): the pool's plumbing with stand-in
kernel modules, then, for real, a worker's compile for sm_90 found by the main process's own
Triton cache lookup (no GPU needed: Triton's compiler and ptxas run on the CPU, the driver is
replaced by one that only names the target: _sm90_main.py), and the fallback when the two cache
keys differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from test_precompile import Recorder, _cuda_kernels, on_fake_gpu  # noqa: F401 - a fixture
from torchkiln_codegen_triton import compile_pool
from torchkiln_codegen_triton import precompile as P

SM90 = ("cuda", 90, 32)


@pytest.fixture(autouse=True)
def fresh_pool():
    compile_pool.reset_for_tests()
    yield
    compile_pool.reset_for_tests()


def _module(tmp_path, name, body):
    """A stand-in kernel module: ``f.warmup`` echoes what the worker saw as the binary's hash."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


ECHO = """
import os, time

class _Compiled:
    def __init__(self, hash):
        self.hash = hash

class _Fn:
    def warmup(self, *args, grid, **kwargs):
        time.sleep(0.2)  # long enough that both workers take jobs
        seen = (os.getpid(), args, grid, kwargs, os.environ.get("CUDA_VISIBLE_DEVICES"),
                os.environ.get("TRITON_INTERPRET"), os.environ.get("TRITON_CACHE_DIR"))
        return _Compiled(repr(seen))

f = _Fn()
"""


def _job(path, name, *calls, cache_dir="/nonexistent-cache"):
    return {"context": (cache_dir, {}, SM90), "module": name, "path": path, "calls": list(calls)}


def test_every_job_is_answered_once_by_some_worker_with_what_it_was_given(tmp_path):
    echo = _module(tmp_path, "tk_echo", ECHO)
    failing = _module(tmp_path, "tk_failing", "raise ValueError('bad kernel module')\n")
    jobs = [
        _job(echo, "tk_echo", ("f", (i, 3), {"grid": (i + 1,), "XBLOCK": 64}), cache_dir="/c")
        for i in range(6)
    ]
    jobs.insert(2, _job(failing, "tk_failing", ("f", (), {"grid": (1,)})))
    jobs.append(_job(str(tmp_path / "missing.py"), "tk_missing"))
    pool = compile_pool.CompilePool(2)
    try:
        replies = dict(pool.run(jobs, parallel=2))
    finally:
        pool.close()
    assert sorted(replies) == list(range(len(jobs)))
    assert replies[2] == ("error", "ValueError: bad kernel module")
    assert replies[len(jobs) - 1][0] == "error"
    pids = set()
    for index, job in enumerate(jobs):
        if job["module"] != "tk_echo":
            continue
        status, (seen,) = replies[index]
        pid, args, grid, kwargs, visible, interpret, cache_dir = eval(seen)
        (_, want_args, want_kwargs) = job["calls"][0]
        assert status == "ok" and args == want_args and kwargs == {"XBLOCK": 64}
        assert grid == want_kwargs["grid"]
        assert (visible, interpret, cache_dir) == ("", "0", "/c")  # no GPU; compiled; our cache
        pids.add(pid)
    assert len(pids) == 2 and os.getpid() not in pids  # both workers worked, neither is us


def test_a_worker_that_dies_costs_only_its_job(tmp_path):
    echo = _module(tmp_path, "tk_echo2", ECHO)
    dying = _module(tmp_path, "tk_dying", "import os\nos._exit(3)\n")
    jobs = [_job(echo, "tk_echo2", ("f", (i,), {"grid": (1,)})) for i in range(4)]
    jobs.insert(1, _job(dying, "tk_dying"))
    pool = compile_pool.CompilePool(2)
    try:
        replies = dict(pool.run(jobs, parallel=2))
        assert sorted(replies) == list(range(len(jobs)))
        assert replies[1] is None
        assert all(replies[i][0] == "ok" for i in (0, 2, 3, 4))
        assert len(pool.live()) == 1
        # with every worker gone, a job gets no answer rather than a wait
        jobs = [_job(dying, "tk_dying"), _job(echo, "tk_echo2", ("f", (), {"grid": (1,)}))]
        replies = dict(pool.run(jobs, parallel=2))
        assert replies == {0: None, 1: None} and not pool.live()
    finally:
        pool.close()


def test_a_shared_pool_whose_workers_all_died_is_not_started_again(tmp_path):
    dying = _module(tmp_path, "tk_dying2", "import os\nos._exit(3)\n")
    pool = compile_pool.shared_pool(1)
    assert dict(pool.run([_job(dying, "tk_dying2")], 1)) == {0: None} and not pool.live()
    assert compile_pool.shared_pool(1) is None
    assert compile_pool.reason_off() == "every compile worker died"


def test_closing_early_waits_for_running_jobs_and_the_pool_is_reused(tmp_path):
    echo = _module(tmp_path, "tk_echo3", ECHO)
    pool = compile_pool.shared_pool(2)
    assert pool is not None and compile_pool.shared_pool(8) is pool  # one pool per process
    replies = pool.run([_job(echo, "tk_echo3", ("f", (i,), {"grid": (1,)})) for i in range(6)], 2)
    index, reply = next(replies)
    assert reply[0] == "ok"
    replies.close()  # stops handing out jobs, waits for the ones running
    second = dict(pool.run([_job(echo, "tk_echo3", ("f", (7,), {"grid": (2,)}))], 2))
    assert second[0][0] == "ok" and eval(second[0][1][0])[1] == (7,)
    compile_pool.turn_off("test")
    assert compile_pool.shared_pool(2) is None and compile_pool.reason_off() == "test"
    assert not pool.live()  # turning off closed the workers


def test_a_job_that_does_not_pickle_gets_no_answer_and_the_worker_goes_on(tmp_path):
    echo = _module(tmp_path, "tk_echo4", ECHO)
    jobs = [
        _job(echo, "tk_echo4", ("f", (lambda: 0,), {"grid": (1,)})),
        _job(echo, "tk_echo4", ("f", (5,), {"grid": (1,)})),
    ]
    pool = compile_pool.CompilePool(1)
    try:
        replies = dict(pool.run(jobs, parallel=1))
        assert replies[0] is None and replies[1][0] == "ok" and len(pool.live()) == 1
    finally:
        pool.close()


@pytest.mark.usefixtures("on_fake_gpu")
def test_a_failing_pool_turns_workers_off_and_every_kernel_is_warmed_on_threads(monkeypatch):
    monkeypatch.setattr(P, "async_compile_mode", lambda: None)
    kernels = _cuda_kernels()
    recorders = [Recorder() for _ in kernels]
    for k, r in zip(kernels, recorders):
        k._fn = r

    def broken(*args):
        raise OSError("no more processes")

    monkeypatch.setattr(P, "in_processes", broken)
    with pytest.warns(RuntimeWarning, match="compile workers failed: OSError"):
        assert P.precompile(kernels, workers=2, processes=True) == len(kernels)
    assert [len(r.warmups) for r in recorders] == [1] * len(kernels)
    assert "no more processes" in compile_pool.reason_off()


def test_a_pool_inherited_through_a_fork_is_left_to_its_owner(tmp_path):
    pool = compile_pool.shared_pool(1)
    assert pool is not None and compile_pool.pool_running()
    owner = pool.owner
    pool.owner = owner + 1  # as a forked child sees it: another process's workers
    try:
        assert not compile_pool.pool_running()
        pool.close()  # not ours to close
        assert len(pool.live()) == 1
        fresh = compile_pool.shared_pool(1)
        assert fresh is not None and fresh is not pool and len(fresh.live()) == 1
    finally:
        pool.owner = owner
        pool.close()
    assert not pool.live()


# --- for real: Triton compiles for sm_90 on this machine, in a fresh main process -------------


def _main_process(scenario, tmp_path):
    """Run ``_sm90_main.py`` (a fresh process compiling for real: this one has Triton in
    interpreter mode) and return what it printed."""
    from triton import knobs

    if "listener" not in dir(knobs.compilation):
        pytest.skip("this Triton has no compilation listener to tell a cache hit")
    script = os.path.join(os.path.dirname(__file__), "_sm90_main.py")
    env = dict(os.environ)
    env.pop("TRITON_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, script, scenario, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _looked_up(compiles):
    """Whether each of the three kernels (distinct functions, named from their text) was a cache
    hit, after checking that each was looked up once."""
    assert len({name for name, _ in compiles}) == len(compiles)
    return [hit for _, hit in compiles]


def test_a_workers_sm90_binary_is_the_main_processs_cache_hit(tmp_path):
    out = _main_process("workers", tmp_path)
    assert out["precompiled"] == 3 and out["off"] is None and out["warnings"] == []
    # each kernel looked up once in the main process, and found: its worker compiled it, under
    # the main process's cache key, into its cache directory
    assert _looked_up(out["compiles"]) == [True] * 3
    assert len(out["cache"]) == 3
    assert out["stats"] == {"ok": 3, "error": 0, "no_answer": 0, "found": 3, "differed": 0}
    # and that binary is the one the main process compiles itself (fresh cache, no workers):
    # same cache keys, and these were real compiles here
    assert out["own_precompiled"] == 3
    assert _looked_up(out["own_compiles"]) == [False] * 3
    assert out["own_cache"] == out["cache"]


def test_differing_cache_keys_turn_workers_off_and_every_kernel_is_still_compiled(tmp_path):
    out = _main_process("differ", tmp_path)
    assert out["precompiled"] == 3
    assert len(out["warnings"]) == 1 and "cache key differs" in out["warnings"][0]
    assert out["off"] and not out["pool_running"] and out["stats"]["differed"] == 1
    # nothing found in the cache: the main process compiled each kernel itself, once
    assert _looked_up(out["compiles"]) == [False] * 3


def test_a_few_kernels_start_no_workers_and_compile_on_threads(tmp_path):
    out = _main_process("few", tmp_path)
    assert out["precompiled"] == 3 and not out["started_early"] and not out["pool_running"]
    assert _looked_up(out["compiles"]) == [False] * 3
    assert len(out["cache"]) == 3 and out["off"] is None
