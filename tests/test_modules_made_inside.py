"""torch.nn modules made inside a compiled function (``m = nn.ReLU()``): eager makes a new one on
every call. Capture makes one to trace it, and that capture-time object must never stand for the
module at run time: before, a hook registered on ``m`` was registered on that one shared object
by every call (hooks piled up: outputs doubled once more per call, hooks fired with the
capture-time module), an attribute set on ``m`` was replayed onto it, and a hook registered in
the same graph as the call did not run at all.

Each case runs eagerly and compiled over several calls on fresh inputs: same outputs, same hook
calls (how many, and each with a module of its own call, never one object shared by calls).
"""

from __future__ import annotations

import torch
import torchkiln
from torch import nn

SEEN: list = []


def doubling_hook(mod, args, out):
    SEEN.append(("post", mod))
    return out * 2


def recording_pre_hook(mod, args):
    SEEN.append(("pre", mod))


def hooks_on_a_new_module(x):
    m = nn.ReLU()
    m.register_forward_hook(doubling_hook)
    m.register_forward_pre_hook(recording_pre_hook)
    return m(x) + 1


def attribute_read_by_a_hook(x):
    m = nn.Tanh()
    m.scale = x.shape[0]
    m.register_forward_hook(lambda mod, args, out: out * mod.scale)
    return m(x)


def train_mode_switch(x):
    d = nn.Dropout(p=0.5)
    d.eval()  # eager: a new module each call, in eval mode: the identity
    return d(x) * 3


def module_returned(x):
    m = nn.Softplus(beta=2.0)
    m.register_forward_hook(doubling_hook)
    return m(x), m


def _run(fn, x):
    SEEN.clear()
    out = fn(x)
    calls = list(SEEN)
    SEEN.clear()
    return out, calls


def _check(fn, sizes=(4, 4, 5, 4, 6)):
    compiled = torchkiln.compile(fn)
    modules_seen = []
    for n in sizes:
        x = torch.randn(n, 3)
        want, want_calls = _run(fn, x)
        got, got_calls = _run(compiled, x)
        if isinstance(want, tuple):  # (output, the module made by this call)
            (want, want_mod), (got, got_mod) = want, got
            assert type(got_mod) is type(want_mod) and got_mod.beta == want_mod.beta
            assert len(got_mod._forward_hooks) == len(want_mod._forward_hooks) == 1
            modules_seen.append(got_mod)
        torch.testing.assert_close(got, want)
        assert [k for k, _ in got_calls] == [k for k, _ in want_calls]
        modules_seen += [m for _, m in got_calls]
    # every call had a module of its own, as in eager (one call's hooks see one module)
    per_call = len(modules_seen) // len(sizes)
    assert len({id(m) for m in modules_seen}) == len(sizes) or per_call == 0
    return compiled


def test_hooks_registered_on_a_module_made_inside():
    _check(hooks_on_a_new_module)


def test_an_attribute_set_on_a_module_made_inside():
    _check(attribute_read_by_a_hook)


def test_train_mode_of_a_module_made_inside():
    compiled = _check(train_mode_switch)
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), x * 3)


def test_a_module_made_inside_and_returned_is_this_calls_own():
    compiled = torchkiln.compile(module_returned)
    first = compiled(torch.randn(3))[1]
    second = compiled(torch.randn(3))[1]
    assert first is not second
    assert len(first._forward_hooks) == len(second._forward_hooks) == 1
    _check(module_returned)


def test_hooks_registered_on_a_module_from_outside_run_in_the_same_call():
    """A hook registered inside the compiled function on a module it was given is pending until
    the graph ends: the module's call then runs in Python so the hook fires, as in eager."""

    def f(x, m):
        handle = m.register_forward_hook(doubling_hook)
        y = m(x)
        handle.remove()
        return y + 1

    compiled = torchkiln.compile(f)
    for n in (3, 3, 4):
        x = torch.randn(n)
        m_e, m_c = nn.Sigmoid(), nn.Sigmoid()
        want, want_calls = _run(lambda t, m=m_e: f(t, m), x)
        got, got_calls = _run(lambda t, m=m_c: compiled(t, m), x)
        torch.testing.assert_close(got, want)
        assert [(k, m is m_c) for k, m in got_calls] == [(k, m is m_e) for k, m in want_calls]
        assert not m_c._forward_hooks and not m_e._forward_hooks
