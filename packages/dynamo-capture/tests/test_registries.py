"""The registries of generated code (``bytecode/registry.py``) are owned by each capture.

A long-running process that compiles many distinct functions with graph breaks must not keep what
it generated for the ones it has dropped: each function's continuations and closure transforms are
recorded in its own ``CaptureContext.codes``, which dies with it. Every function is checked against
eager on fresh inputs while it lives.
"""

from __future__ import annotations

import gc
import weakref

import torch
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.trace_rules import disable

SEEN: list[float] = []


@disable
def _record(t):
    """Runs in Python (a graph break at each call): what it saw is the program's side effect."""
    SEEN.append(round(float(t.sum()), 3))


_TEMPLATE = """
def program_{i}(x, w):
    y = torch.tanh(x @ w) * {scale} + {i}
    _record(y)  # a break in the frame: a resume_at_N continuation

    def inner(t):  # a closure that breaks: captured with its cell as an argument
        u = t * {scale} + y.mean()
        _record(u)
        return u.relu()

    out = inner(y - 1.0)
    total = 0.0
    for k in range({loops}):  # a break inside a loop: a continuation with an iterator on the stack
        _record(out[k])
        total = total + out[k].sum()
    return out.sin() + total
"""


def _program(i: int):
    scope = {"torch": torch, "_record": _record}
    exec(
        compile(
            _TEMPLATE.format(i=i, scale=1.0 + i / 7, loops=1 + i % 3), f"<program_{i}>", "exec"
        ),
        scope,
    )
    return scope[f"program_{i}"]


def _graphs_as_traced(gm, example_inputs):
    return gm.forward


def _check(fn, compiled) -> None:
    for _ in range(2):  # the second call runs the cached entries of every continuation
        x, w = torch.randn(4, 5), torch.randn(5, 5)
        SEEN.clear()
        expected = fn(x, w)
        eager_seen = list(SEEN)
        SEEN.clear()
        got = compiled(x, w)
        torch.testing.assert_close(got, expected)
        assert SEEN == eager_seen


def test_registries_belong_to_each_capture_and_stay_bounded():
    contexts = []
    per_function = set()
    for i in range(60):
        fn = _program(i)
        compiled = capture(fn, _graphs_as_traced)
        _check(fn, compiled)
        ctx = compiled.ctx
        assert compiled.graph_breaks, "each program must break (else it tests nothing)"
        # what it generated is recorded, and only that: one entry per continuation and closure transform
        assert 0 < len(ctx.codes) <= len(ctx._resumes) + len(ctx._callees)
        per_function.add(len(ctx.codes))
        contexts.append(weakref.ref(ctx))
        del fn, compiled, ctx
    assert max(per_function) <= 8  # the same shape of program generates the same few code objects
    gc.collect()
    alive = [ref for ref in contexts if ref() is not None]
    assert not alive, (
        f"{len(alive)} of {len(contexts)} dropped captures are still held (with their registries)"
    )


def test_a_live_capture_keeps_its_registry_while_it_runs():
    fn = _program(3)
    compiled = capture(fn, _graphs_as_traced)
    _check(fn, compiled)
    before = len(compiled.ctx.codes)
    gc.collect()
    _check(fn, compiled)  # continuations still map back to their original code
    assert len(compiled.ctx.codes) == before > 0
