"""Calls that read or change torch's process-wide state (seeding, random-generator state, global
defaults) inside a compiled function run on every call, as in eager: capture breaks the graph
around them instead of running them once while tracing."""

from __future__ import annotations

import torch
import torchkiln


def _breaks(compiled) -> list:
    return torchkiln.report(compiled).graph_breaks


def test_manual_seed_runs_on_every_call():
    def f(x):
        torch.manual_seed(0)
        return x + torch.rand(3)

    compiled = torchkiln.compile(f)
    x = torch.randn(3)
    first = compiled(x)
    torch.rand(7)  # moves the global generator between the calls
    second = compiled(x)
    # eager gives the same numbers on every call because it seeds each time; so must we
    assert torch.equal(f(x), f(x)) and torch.equal(first, second)
    assert any("manual_seed" in str(b) for b in _breaks(compiled))


def test_generator_methods_run_on_every_call():
    def f(x, gen):
        gen.manual_seed(1234)
        return x + torch.rand(4, generator=gen)

    compiled = torchkiln.compile(f)
    x, gen = torch.randn(4), torch.Generator()
    expected = f(x, torch.Generator())
    torch.testing.assert_close(compiled(x, gen), expected)
    gen.manual_seed(99)  # the user's generator moved: the compiled function seeds it again
    torch.testing.assert_close(compiled(x, gen), expected)


def test_rng_state_is_read_at_call_time():
    def f(x):
        return x * 2, torch.get_rng_state()

    compiled = torchkiln.compile(f)
    x = torch.randn(5)
    for _ in range(3):
        torch.rand(11)
        out, state = compiled(x)
        torch.testing.assert_close(out, x * 2)
        assert torch.equal(state, torch.get_rng_state())


def test_default_dtype_change_is_not_skipped():
    def f(x):
        torch.set_default_dtype(torch.float64)
        y = x + 1
        torch.set_default_dtype(torch.float32)
        return y

    compiled = torchkiln.compile(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    torch.set_default_dtype(torch.float64)
    compiled(x)
    # the function set float32 back on this call too
    assert torch.get_default_dtype() == torch.float32
