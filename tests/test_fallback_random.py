"""``fallback_random`` (Inductor's option of that name): random ops run as ATen calls on torch's
generator, so a compiled function gives eager's random numbers and leaves the generator where
eager leaves it, under the same ``torch.manual_seed`` (torch.compile guarantees the same only with
this option). Each case: fresh random inputs, the same seed for eager and compiled, outputs,
gradients and the generator's state compared."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln

CASES = {
    "dropout": lambda x: F.dropout(x, 0.5) + 1,
    "rand_like": lambda x: torch.rand_like(x) + x,
    "randn": lambda x: torch.randn(x.shape) * x,
    "bernoulli": lambda x: torch.bernoulli(torch.sigmoid(x)) * x,
    "two_dropouts_and_rand": lambda x: (
        F.dropout(x.sin(), 0.3) + torch.rand_like(x) * F.dropout(x, 0.2)
    ),
    "gumbel_softmax": lambda x: F.gumbel_softmax(x.reshape(8, 8), tau=0.5).flatten() * x,
}


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fallback_random_repeats_eagers_draws(name, grad):
    f = CASES[name]
    compiled = torchkiln.compile(f, options={"fallback_random": True, "strict": True})
    for seed in (0, 1234):
        x = torch.randn(64, requires_grad=grad)
        torch.manual_seed(seed)
        want = f(x)
        want_state = torch.get_rng_state()
        if grad:
            want.sum().backward()
            want_grad, x.grad = x.grad, None
        torch.manual_seed(seed)
        got = compiled(x)
        assert torch.equal(torch.get_rng_state(), want_state)
        torch.testing.assert_close(got, want)
        if grad:
            got.sum().backward()
            torch.testing.assert_close(x.grad, want_grad)
    report = torchkiln.report(compiled)
    assert not report.eager_fallbacks and report.graphs
    externs = [c for g in report.graphs for c in g.extern_calls + g.fallbacks]  # ATen calls
    assert any(
        word in c for c in externs for word in ("rand", "bernoulli", "dropout", "exponential")
    ), externs


def test_without_fallback_random_the_draws_are_compiled():
    """The default (as in torch.compile): generated code draws from per-call seeds; still a
    proper dropout (kept elements scaled, about the right share dropped), repeatable by seed."""
    f = CASES["dropout"]
    compiled = torchkiln.compile(f, options={"strict": True})
    x = torch.randn(4096)
    torch.manual_seed(5)
    a = compiled(x)
    torch.manual_seed(5)
    b = compiled(x)
    torch.testing.assert_close(a, b)
    kept = a != 1
    torch.testing.assert_close(a[kept], x[kept] * 2 + 1)
    assert 0.4 < kept.float().mean().item() < 0.6
