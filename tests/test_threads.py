"""Compiled functions called from several threads at once (C++ backend).

Eight threads making their first call together used to compile eight copies, some failing inside
torch.fx (``CURRENT_PATCHER is None``) and staying eager for good; the out-of-bounds flag of
indexing kernels was one process-wide variable, so with 4 threads out-of-range calls returned
data and valid calls raised IndexError.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
import torchkiln

pytest.importorskip("torchkiln_codegen_cpp")


def _run_threads(n: int, work) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def worker(i: int) -> None:
        barrier.wait()  # every thread starts its first call together
        try:
            results[i] = work(i)
        except BaseException as e:  # noqa: BLE001 - checked by the caller
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_eight_threads_calling_first_compile_once():
    def f(x, y):
        return torch.softmax(torch.sin(x) * y, dim=-1) + x.sum(dim=0)

    cf = torchkiln.compile(f, options=torchkiln.CompileOptions(codegen="cpp"))
    inputs = [(torch.randn(64, 32), torch.randn(64, 32)) for _ in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns
        results = _run_threads(8, lambda i: cf(*inputs[i]))
    for out, args in zip(results, inputs):
        assert not isinstance(out, BaseException), repr(out)
        torch.testing.assert_close(out, f(*args), rtol=1e-5, atol=1e-5)
    report = torchkiln.report(cf)
    assert report.num_graphs == 1 and len(report.graphs) == 1 and not report.eager_fallbacks


def test_four_threads_mixing_valid_and_out_of_range_indices():
    def f(x, idx):
        return x[idx] * 2 + 1

    cf = torchkiln.compile(f, options=torchkiln.CompileOptions(codegen="cpp"))
    x = torch.randn(50, 64)
    cf(x, torch.randint(0, 50, (400,)))  # compiled before the threads start
    plans = [[(i + t) % 3 == 0 for i in range(60)] for t in range(4)]

    def work(t: int) -> list[str]:
        problems = []
        for i, bad in enumerate(plans[t]):
            idx = torch.randint(0, 50, (400,))
            if bad:
                idx[(i * 13) % 400] = 50 + i % 3 if i % 2 else -51
            try:
                out = cf(x, idx)
            except IndexError:
                if not bad:
                    problems.append(f"thread {t} call {i}: a valid call raised IndexError")
                continue
            if bad:
                problems.append(f"thread {t} call {i}: an out-of-range call returned data")
            elif not torch.equal(out, f(x, idx)):
                problems.append(f"thread {t} call {i}: wrong values")
        return problems

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # an out-of-range call may warn that the graph reruns eagerly
        results = _run_threads(4, work)
    assert all(isinstance(r, list) for r in results), results
    assert [p for r in results for p in r] == []
