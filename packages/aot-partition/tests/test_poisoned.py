"""Outputs whose backward eager refuses (a value their op saved was written in place later in
the graph): compiled, not refused at trace time; they require grad, and a gradient reaching one
raises eager's error, also from a runtime rebuilt from a cache (``runtime_metadata``)."""

from __future__ import annotations

import pytest
import torch
from torchkiln_aot_partition import aot_compile, rebuild_runtime, runtime_metadata

_REFUSED = "one of the variables needed for gradient computation has been modified"


def _saved_then_written(x, w):
    a = x * w
    b = a.sin()
    a.mul_(3)
    return b, a


def _check(runtime, n):
    x, w = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    b, a = runtime(x * 1, w)
    be, ae = _saved_then_written(xe * 1, we)
    torch.testing.assert_close(b, be)
    torch.testing.assert_close(a, ae)
    assert b.requires_grad and a.requires_grad
    (a * 2).sum().backward(retain_graph=True)
    (ae * 2).sum().backward(retain_graph=True)
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)
    for out in (b, be):
        with pytest.raises(RuntimeError, match=_REFUSED):
            out.sum().backward()


def test_refused_output_compiles_and_raises_eagers_error(compiler, capture):
    gm = capture(_saved_then_written)
    examples = [torch.randn(5, requires_grad=True) * 1, torch.randn(5, requires_grad=True)]
    runtime = aot_compile(gm, examples, fw_compiler=compiler)
    assert runtime.plan.poisoned and runtime.plan.poisoned[0][0] == 0
    assert _REFUSED in runtime.plan.poisoned[0][1]
    _check(runtime, 5)
    meta = runtime_metadata(runtime)
    assert meta.poisoned == runtime.plan.poisoned
    rebuilt = rebuild_runtime(gm, meta, compiler.graphs[0].forward, compiler.graphs[1].forward)
    _check(rebuilt, 5)
