"""``associative_scan`` with an elementwise combine function, inlined as graph ops
(``variables/scan.py``); ``dict.fromkeys`` built during capture. Values against eager's (the
generic, vmapped scan) on fresh inputs."""

from __future__ import annotations

import torch
from torch._higher_order_ops.associative_scan import associative_scan
from torchkiln_dynamo_capture import capture, explain


def _backend(gm, example_inputs):
    return gm.forward


def _recurrence(left, right):
    """Mamba's: (a, b) then (a', b') is (a a', a' b + b'), associative, not commutative."""
    a_l, b_l = left
    a_r, b_r = right
    return a_l * a_r, a_r * b_l + b_r


def _check(fn, make, breaks=0):
    report = explain(fn)(*make())
    assert len(report.breaks) == breaks and (breaks or report.graph_count == 1), report
    captured = capture(fn, _backend)
    for _ in range(2):
        inputs = make()
        torch.testing.assert_close(captured(*inputs), fn(*inputs), rtol=1e-5, atol=1e-5)


def test_a_linear_recurrence_scan_is_one_graph():
    for length in (1, 2, 13, 16):

        def make(length=length):
            return torch.rand(2, 3, length, 4) * 0.9 + 0.1, torch.randn(2, 3, length, 4)

        def fn(a, b):
            _, states = associative_scan(_recurrence, (a, b), dim=2, combine_mode="generic")
            return states * 2

        _check(fn, make)


def test_reverse_and_a_single_tensor():
    def fn(x):
        forward = associative_scan(lambda a, b: a + b, x, dim=1, combine_mode="generic")
        backward = associative_scan(
            lambda a, b: a * b, x, dim=0, reverse=True, combine_mode="generic"
        )
        return forward, backward

    _check(fn, lambda: (torch.rand(5, 7) + 0.5,))
    x = torch.rand(5, 7)
    torch.testing.assert_close(capture(fn, _backend)(x)[0], x.cumsum(1))


def test_a_combine_that_is_not_elementwise_runs_in_python():
    def combine(left, right):
        return left @ right  # matrix products: not elementwise, vmapped in eager

    def fn(x):
        return associative_scan(combine, x, dim=0, combine_mode="generic") + 1

    _check(fn, lambda: (torch.randn(6, 3, 3) * 0.5,), breaks=1)
    (reason,) = [b.reason for b in explain(fn)(torch.randn(6, 3, 3)).breaks]
    assert "associative_scan with a combine function calling" in reason, reason


def test_dict_fromkeys_is_built_during_capture():
    def fn(x):
        sizes = dict.fromkeys(range(3))
        shared = dict.fromkeys(["a", "b"], [])
        sizes[1] = 4
        shared["a"].append(1)
        return x * sizes[1], sizes, shared

    report = explain(fn)(torch.ones(2))
    assert report.graph_count == 1 and not report.break_reasons, report
    out, sizes, shared = capture(fn, _backend)(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 4.0))
    assert sizes == {0: None, 1: 4, 2: None}
    assert shared == {"a": [1], "b": [1]} and shared["a"] is shared["b"]
