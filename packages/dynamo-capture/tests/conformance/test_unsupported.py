"""Constructs whole-graph capture cannot handle: with fullgraph=True they raise a located error.

The error must name the user's file and line (torchkiln's ``Unsupported``); with fullgraph=False
the function must still return eager's result.
"""

from __future__ import annotations

import warnings

import pytest
from _conformance_harness import PEER, RecordingBackend, assert_same, randn


def data_dependent_branch(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def data_dependent_loop_count(x):
    out = x
    for _ in range(int((x > 0).sum())):
        out = out + 1
    return out


def tolist_in_python(x):
    vals = x.tolist()
    return x * len([v for row in vals for v in row if v > 0])


PROGRAMS = [
    data_dependent_branch,
    data_dependent_loop_count,
    tolist_in_python,
]


def _unsupported_types() -> tuple[type[BaseException], ...]:
    if PEER == "dynamo":
        import torch._dynamo.exc

        return (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError)
    from torchkiln_dynamo_capture import Unsupported

    return (Unsupported,)


def _capture(fn, backend, fullgraph):
    if PEER == "dynamo":
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(fn, backend=backend, fullgraph=fullgraph)
    from torchkiln_dynamo_capture import capture

    return capture(fn, backend, fullgraph=fullgraph)


@pytest.mark.parametrize("fn", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_fullgraph_raises_located_unsupported(fn) -> None:
    compiled = _capture(fn, RecordingBackend(), fullgraph=True)
    with pytest.raises(_unsupported_types()) as info:
        compiled(randn(3, 4))
    if PEER == "torchkiln":
        err = info.value
        assert err.filename and err.filename.endswith("test_unsupported.py"), str(err)
        first, last = fn.__code__.co_firstlineno, max(ln for *_, ln in fn.__code__.co_lines() if ln)
        assert err.lineno is not None and first <= err.lineno <= last, str(err)


@pytest.mark.parametrize("fn", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_without_fullgraph_result_is_still_correct(fn) -> None:
    # the frame is split at the construct (a graph break): no warning, eager's results
    backend = RecordingBackend()
    compiled = _capture(fn, backend, fullgraph=False)
    for _ in range(2):
        x = randn(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            actual = compiled(x.clone())
        assert_same(actual, fn(x.clone()), rtol=None, atol=None)
