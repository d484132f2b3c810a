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


def test_generator_made_and_seeded_inside_the_function():
    """``g = torch.Generator(); g.manual_seed(s)`` inside the function, with ``s`` changing
    between calls: every call draws from its own seed, eager's numbers (the draw runs in Python
    between graphs, on the generator), never the capture-time seed's."""

    def f(x, s):
        g = torch.Generator()
        g.manual_seed(s)
        return x * 2 + torch.rand(3, generator=g)

    compiled = torchkiln.compile(f)
    for s in (1, 2, 1, 77):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, s), f(x, s), rtol=0, atol=0)


def test_global_seed_from_an_argument_gives_eager_pattern():
    """``torch.manual_seed(s)`` inside the function: compiled random ops draw from their own
    Philox stream (not eager's numbers, as torch.compile's), but each call is seeded again: the
    same seed gives the same numbers on every call and another seed other numbers, as in eager,
    whatever the global generator did in between."""

    def f(x, s):
        torch.manual_seed(s)
        return x + torch.rand(3)

    compiled = torchkiln.compile(f)
    x = torch.zeros(3)
    seeds = (3, 4, 3, 4, 5)
    got, want = [], []
    for s in seeds:
        torch.rand(5)  # the global generator moves between calls
        got.append(compiled(x, s))
        want.append(f(x, s))
    for i in range(len(seeds)):
        assert ((got[i] >= 0) & (got[i] < 1)).all()
        for j in range(len(seeds)):
            assert (
                torch.equal(got[i], got[j])
                == torch.equal(want[i], want[j])
                == (seeds[i] == seeds[j])
            )


def test_saved_and_restored_rng_state_repeats_the_numbers():
    """get_rng_state / set_rng_state (and a generator's get_state / set_state, and fork_rng)
    inside the function act at every call: the numbers drawn after the restore repeat the ones
    before it, as in eager."""

    def global_state(x):
        state = torch.get_rng_state()
        a = x + torch.rand(4)
        torch.set_rng_state(state)
        return a, x + torch.rand(4)

    def generator_state(x):
        g = torch.Generator().manual_seed(3)
        state = g.get_state()
        a = x + torch.rand(4, generator=g)
        g.set_state(state)
        return a, x + torch.rand(4, generator=g)

    def forked(x):
        with torch.random.fork_rng():
            torch.manual_seed(4)
            a = x + torch.rand(4)
        return a, x + torch.rand(4)

    plain = torchkiln.compile(lambda x: x + torch.rand(4))
    for fn, repeats in ((global_state, True), (generator_state, True), (forked, False)):
        compiled = torchkiln.compile(fn)
        for seed in (0, 1):
            x = torch.randn(4)
            torch.manual_seed(seed)
            a, b = compiled(x)
            torch.manual_seed(seed)
            ea, eb = fn(x)
            assert torch.equal(a, b) == torch.equal(ea, eb) == repeats, fn.__name__
            if fn is generator_state:  # drawn in Python from the generator: eager's numbers
                torch.testing.assert_close((a, b), (ea, eb), rtol=0, atol=0)
            if fn is forked:
                # fork_rng restored the global generator: the draw after the block is the one
                # a plain draw right after manual_seed(seed) gives, in each mode
                torch.manual_seed(seed)
                assert torch.equal(b, plain(x))
                torch.manual_seed(seed)
                assert torch.equal(eb, x + torch.rand(4))
