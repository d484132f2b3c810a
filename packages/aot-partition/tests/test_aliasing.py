"""Graph inputs that share a storage and are mutated: traced over one base per storage, so a write
through one alias is read through the others, as in eager (results, input state, gradients)."""

from __future__ import annotations

import pytest
import torch
from torchkiln_aot_partition import aot_compile


def _scale_then_read(a, b):
    a.mul_(2)
    return (b + 0,)


def _fill_then_sum(a, b):
    b.fill_(7.0)
    return (a.sum(),)


def _two_writes(a, b):
    a.add_(1)
    b.mul_(2)
    return (a + b,)


def _run_both(fn, compiled, make):
    """(compiled result, eager result, the compiled call's storage, eager's storage)."""
    base_c = make()
    base_e = base_c.clone()
    got = compiled(*_views(base_c))
    want = fn(*_views(base_e))
    return got, want, base_c, base_e


def _views(base):
    return base, base[0]


@pytest.mark.parametrize("fn", [_scale_then_read, _fill_then_sum])
def test_view_of_an_input(fn, compiler, capture):
    x = torch.randn(3, 4)
    compiled = aot_compile(capture(fn), [x, x[0]], fw_compiler=compiler)
    # the placeholders are one base per storage, not the two aliased inputs
    assert len([n for n in compiler.graphs[0].graph.nodes if n.op == "placeholder"]) == 1
    for _ in range(2):
        got, want, base_c, base_e = _run_both(fn, compiled, lambda: torch.randn(3, 4))
        torch.testing.assert_close(got, list(want))
        torch.testing.assert_close(base_c, base_e)


def test_overlapping_slices(compiler, capture):
    buf = torch.randn(12)
    compiled = aot_compile(capture(_two_writes), [buf[1:7], buf[4:10]], fw_compiler=compiler)
    for _ in range(2):
        b_c = torch.randn(12)
        b_e = b_c.clone()
        got = compiled(b_c[1:7], b_c[4:10])
        want = _two_writes(b_e[1:7], b_e[4:10])
        torch.testing.assert_close(got, list(want))
        torch.testing.assert_close(b_c, b_e)  # untouched ends stay, the overlap got both writes


def test_read_only_aliases_need_no_base(compiler, capture):
    def fn(a, b):
        return (a * b.sum(),)

    x = torch.randn(3, 4)
    compiled = aot_compile(capture(fn), [x, x[1]], fw_compiler=compiler)
    assert len([n for n in compiler.graphs[0].graph.nodes if n.op == "placeholder"]) == 2
    y = torch.randn(3, 4)
    torch.testing.assert_close(compiled(y, y[1]), list(fn(y, y[1])))


def test_training_path_with_aliased_mutation(compiler, capture):
    def fn(a, b, w):
        a.mul_(2)
        return ((b * w).sum(),)

    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    compiled = aot_compile(capture(fn), [x, x[0], w], fw_compiler=compiler)
    x_c, w_c = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    x_e, w_e = x_c.clone(), w_c.detach().clone().requires_grad_()
    got = compiled(x_c, x_c[0], w_c)[0]
    want = fn(x_e, x_e[0], w_e)[0]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x_c, x_e)
    got.backward()
    want.backward()
    torch.testing.assert_close(w_c.grad, w_e.grad)
