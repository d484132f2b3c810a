"""Module hooks inside a captured forward: global (register_module_forward_hook & co.) and per-submodule
forward, pre- and backward hooks, each case against eager on fresh random inputs: outputs, gradients,
and the order and arguments of the hook calls recorded in a list."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torchkiln_dynamo_capture import capture, explain
from torchkiln_dynamo_capture.testing import RecordingBackend


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Sequential(nn.ReLU(), nn.Linear(6, 3))

    def forward(self, x):
        return self.b(self.a(x)).tanh()


@pytest.fixture
def handles():
    """Hook handles removed after the test whatever happens: a global hook left behind would leak
    into every later test."""
    hs = []
    yield hs
    for h in hs:
        h.remove()


def _net():
    torch.manual_seed(0)
    return Net()


def _same_log(got, want):
    """Both logs hold (label, tensors...) entries in the same order with the same values."""
    assert [e[0] for e in got] == [e[0] for e in want]
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g[1:], w[1:]):
            torch.testing.assert_close(a, b)


def _logging_hooks(log):
    def pre(mod, args):
        log.append((f"pre {type(mod).__name__}", args[0].clone()))

    def post(mod, args, out):
        log.append((f"post {type(mod).__name__}", args[0].clone(), out.clone()))

    return pre, post


def _check(f, make_inputs, log, be=None, calls=3):
    """``f`` captured and eager agree (outputs, then the hook log) on ``calls`` fresh inputs."""
    cf = capture(f, be or RecordingBackend())
    for _ in range(calls):
        x = make_inputs()
        log.clear()
        want = f(x)
        want_log = list(log)
        log.clear()
        got = cf(x)
        torch.testing.assert_close(got, want)
        _same_log(log, want_log)
        assert want_log  # the hooks did fire
    return cf


def test_global_hooks_fire_for_every_submodule_in_order(handles):
    net, log, be = _net(), [], RecordingBackend()
    pre, post = _logging_hooks(log)
    handles += [
        nn_module.register_module_forward_pre_hook(pre),
        nn_module.register_module_forward_hook(post),
    ]
    _check(lambda x: net(x), lambda: torch.randn(5, 4), log, be)
    assert be.calls == 1  # traceable hooks are inlined: one graph, no break
    # eager fires for Net, a, b, b.0, b.1: five pre- and five post-hook calls
    assert len(log) == 10


def test_global_hooks_that_rewrite_inputs_and_outputs(handles):
    net, log = _net(), []

    def pre(mod, args):
        log.append((f"pre {type(mod).__name__}", args[0].clone()))
        if isinstance(mod, nn.Linear):
            return args[0] * 0.5  # a bare value: nn.Module wraps it in a tuple

    def post(mod, args, out):
        log.append((f"post {type(mod).__name__}", out.clone()))
        return out + 1.0 if isinstance(mod, nn.ReLU) else None

    def kw_post(mod, args, kwargs, out):
        log.append((f"kw {type(mod).__name__}", out.clone()))
        return out * 2.0 if isinstance(mod, nn.Sequential) else None

    handles += [
        nn_module.register_module_forward_pre_hook(pre),
        nn_module.register_module_forward_hook(post),
        nn_module.register_module_forward_hook(kw_post, with_kwargs=True),
    ]
    be = RecordingBackend()
    _check(lambda x: net(x), lambda: torch.randn(5, 4), log, be)
    assert be.calls == 1


def test_global_and_module_hooks_order(handles):
    """Global hooks run before the module's own, pre- and post-, as nn.Module.__call__ does."""
    net, log = _net(), []
    handles.append(
        nn_module.register_module_forward_hook(
            lambda m, a, o: log.append((f"global {type(m).__name__}", o.clone()))
        )
    )
    handles.append(
        net.a.register_forward_hook(lambda m, a, o: log.append(("own a", o.clone())) or o - 1)
    )
    handles.append(
        net.b[1].register_forward_pre_hook(
            lambda m, a: log.append(("own pre b1", a[0].clone())) or (a[0] * 3,)
        )
    )
    _check(lambda x: net(x), lambda: torch.randn(2, 4), log)


def test_registering_and_removing_global_hooks_recompiles(handles):
    net, log, be = _net(), [], RecordingBackend()
    cf = capture(lambda x: net(x), be)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cf(x), net(x))
    assert be.calls == 1
    h = nn_module.register_module_forward_hook(
        lambda m, a, o: log.append((type(m).__name__, o.clone())) or o * 2
    )
    handles.append(h)
    for _ in range(2):
        x = torch.randn(3, 4)
        log.clear()
        want = net(x)
        want_log = list(log)
        log.clear()
        torch.testing.assert_close(cf(x), want)
        _same_log(log, want_log)
    assert be.calls == 2  # the hook set changed once: one recompile
    h.remove()
    x = torch.randn(3, 4)
    log.clear()
    torch.testing.assert_close(cf(x), net(x))
    assert log == []  # never silently stale: the removed hook does not fire
    assert be.calls == 2  # the first entry is valid again
    pre = nn_module.register_module_forward_pre_hook(
        lambda m, a: (a[0] + 1,) if isinstance(m, nn.Linear) else None
    )
    handles.append(pre)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cf(x), net(x))
    assert be.calls == 3


def test_submodule_hooks_added_and_removed_between_calls(handles):
    net, log, be = _net(), [], RecordingBackend()
    cf = capture(lambda x: net(x), be)

    def same(x):
        log.clear()
        want = net(x)
        want_log = list(log)
        log.clear()
        torch.testing.assert_close(cf(x), want)
        _same_log(log, want_log)

    same(torch.randn(2, 4))
    h1 = net.b[1].register_forward_hook(
        lambda m, a, o: log.append(("b1", a[0].clone(), o.clone())) or o.flip(-1)
    )
    same(torch.randn(2, 4))
    h2 = net.a.register_forward_pre_hook(
        lambda m, a, k: log.append(("a", a[0].clone())) or ((a[0].sin(),), k), with_kwargs=True
    )
    same(torch.randn(2, 4))
    h1.remove()
    same(torch.randn(2, 4))
    h2.remove()
    same(torch.randn(2, 4))
    assert be.calls == 4  # no hooks, b1's, b1's and a's, a's; then none again (the first entry)


def test_untraceable_global_hook_breaks_around_the_call(handles, capsys):
    """A hook that prints cannot be captured: each submodule call breaks and runs with its hooks in
    Python; the hook is never skipped, and outputs, prints and the log match eager."""
    net, log = _net(), []

    def noisy(mod, args, out):
        print("hook", type(mod).__name__, tuple(out.shape))
        log.append((type(mod).__name__, out.clone()))
        return out * 2 if isinstance(mod, nn.Linear) else None

    handles.append(nn_module.register_module_forward_hook(noisy))
    f = lambda x: net(x)  # noqa: E731
    cf = capture(f, RecordingBackend())
    for _ in range(2):
        x = torch.randn(2, 4)
        log.clear()
        want = f(x)
        want_log, want_out = list(log), capsys.readouterr().out
        log.clear()
        torch.testing.assert_close(cf(x), want)
        _same_log(log, want_log)
        assert capsys.readouterr().out == want_out and want_out.count("hook") == 5


def test_untraceable_submodule_hook_runs_with_the_submodule():
    net, log = _net(), []
    net.b[1].register_forward_pre_hook(
        lambda m, a: print("pre", tuple(a[0].shape)) or log.append(("pre", a[0].clone()))
    )
    net.b[1].register_forward_hook(lambda m, a, o: log.append(("post", o.clone())) or o + 1)
    cf = capture(lambda x: net(x), RecordingBackend())
    for _ in range(2):
        x = torch.randn(2, 4)
        log.clear()
        want = net(x)
        want_log = list(log)
        log.clear()
        torch.testing.assert_close(cf(x), want)
        _same_log(log, want_log)
    r = explain(lambda x: net(x))(torch.randn(2, 4))
    assert r.graph_break_count >= 1


def _grads_and_log(f, net, x, log):
    log.clear()
    net.zero_grad()
    x = x.clone().requires_grad_()
    out = f(x)
    out.sum().backward()
    return out.detach(), x.grad, [p.grad.clone() for p in net.parameters()], list(log)


def test_submodule_backward_hook_breaks_with_a_reason_and_fires():
    net, log = _net(), []
    f = lambda x: net(x)  # noqa: E731
    cf = capture(f, RecordingBackend())
    x = torch.randn(3, 4)
    cf(
        x.requires_grad_()
    )  # captured without backward hooks first: registering one later must not be silently dropped
    net.b[1].register_full_backward_hook(
        lambda m, gin, gout: log.append(("bwd", gout[0].clone())) or None
    )
    net.a.register_full_backward_pre_hook(
        lambda m, gout: log.append(("bwd pre", gout[0].clone())) or (gout[0] * 2,)
    )
    for _ in range(2):
        x = torch.randn(3, 4)
        want = _grads_and_log(f, net, x, log)
        got = _grads_and_log(cf, net, x, log)
        torch.testing.assert_close(got[:3], want[:3])
        _same_log(got[3], want[3])
        assert len(want[3]) == 2
    r = explain(f)(torch.randn(3, 4))
    assert any("backward hooks" in b.reason for b in r.breaks)


def test_global_backward_hook_fires_for_submodules(handles):
    net, log = _net(), []
    f = lambda x: net(x)  # noqa: E731
    cf = capture(f, RecordingBackend())
    cf(
        torch.randn(3, 4, requires_grad=True)
    )  # captured first without the hook, for the same inputs
    handles.append(
        nn_module.register_module_full_backward_hook(
            lambda m, gin, gout: log.append((type(m).__name__, gout[0].clone())) or None
        )
    )
    for _ in range(2):
        x = torch.randn(3, 4)
        want = _grads_and_log(f, net, x, log)
        got = _grads_and_log(cf, net, x, log)
        torch.testing.assert_close(got[:3], want[:3])
        _same_log(got[3], want[3])
        assert len(want[3]) == 5


def test_global_hooks_through_the_module_proxy(handles):
    """capture(module) fires global hooks for the proxy too (as torch.compile does for its wrapper);
    leaving those out, the calls for the original and its submodules match eager."""
    net, log = _net(), []
    pre, post = _logging_hooks(log)
    handles += [
        nn_module.register_module_forward_pre_hook(pre),
        nn_module.register_module_forward_hook(post),
    ]
    cm = capture(net, RecordingBackend())
    for _ in range(2):
        x = torch.randn(4, 4)
        log.clear()
        want = net(x)
        want_log = list(log)
        log.clear()
        torch.testing.assert_close(cm(x), want)
        _same_log([e for e in log if "CapturedModule" not in e[0]], want_log)


def test_global_hooks_fire_for_a_module_made_inside_the_forward(handles):
    """torch.nn modules without parameters made inside a forward are inlined: eager fires global hooks
    for them too."""
    lin, log = nn.Linear(4, 4), []

    def f(x):
        return nn.GELU()(lin(x)) * 2

    handles.append(
        nn_module.register_module_forward_hook(
            lambda m, a, o: (
                log.append((type(m).__name__, a[0].clone(), o.clone()))
                or (o + 1 if isinstance(m, nn.GELU) else None)
            )
        )
    )
    be = RecordingBackend()
    _check(f, lambda: torch.randn(3, 4), log, be)
    assert be.calls == 1


def _scale_by_two(mod, args, out):
    return out * 2


def _add_three(mod, args, out):
    return out + 3


_made_inside_hook = _scale_by_two


def test_hook_on_a_module_made_inside_the_function_compiles_once():
    """``nn.GELU()`` made in the function and given a forward hook there: each call makes a new
    module and registers the hook under a new handle id. The continuation after the registration
    is guarded by the module's type and its hooks (by identity), not by the module's identity nor
    the handle ids, so later calls reuse it; a different hook (the global rebound) recompiles and
    runs, as in eager."""
    global _made_inside_hook

    def f(x):
        act = nn.GELU()
        act.register_forward_hook(_made_inside_hook)
        return act(x) - 1

    be = RecordingBackend()
    cf = capture(f, be)
    try:
        for _ in range(2):
            x = torch.randn(3, 5)
            torch.testing.assert_close(cf(x), f(x))
        graphs = be.calls
        for _ in range(4):
            x = torch.randn(3, 5)
            torch.testing.assert_close(cf(x), f(x))
        assert be.calls == graphs  # no recompile per call
        _made_inside_hook = _add_three
        for _ in range(3):
            x = torch.randn(3, 5)
            torch.testing.assert_close(cf(x), torch.nn.functional.gelu(x) + 3 - 1)
            torch.testing.assert_close(cf(x), f(x))
        assert be.calls > graphs  # the changed hook was captured anew
        graphs = be.calls
        x = torch.randn(3, 5)
        torch.testing.assert_close(cf(x), f(x))
        assert be.calls == graphs
    finally:
        _made_inside_hook = _scale_by_two


def test_stateless_module_argument_guards_its_attributes():
    """A stateless torch.nn module handed in (not identity-guarded any more): another instance
    with other attributes (slope, training flag) or another hook must not reuse the graph."""

    def f(act, x):
        return act(x) * 2

    be = RecordingBackend()
    cf = capture(f, be)
    for slope in (0.1, 0.1, 0.3):
        act, x = nn.LeakyReLU(slope), torch.randn(4, 4)
        torch.testing.assert_close(cf(act, x), f(act, x))
    drop, x = nn.Dropout(0.5), torch.randn(8, 8)
    drop.eval()
    torch.testing.assert_close(cf(drop, x), f(drop, x))
    drop2 = nn.Dropout(0.5)  # training: not the eval graph (which would give x * 2)
    got = cf(drop2, x)
    kept = got != 0
    assert 0 < kept.sum() < x.numel()
    torch.testing.assert_close(got[kept], x[kept] * 4)
    act = nn.LeakyReLU(0.1)
    act.register_forward_hook(_add_three)
    x = torch.randn(4, 4)
    torch.testing.assert_close(cf(act, x), f(act, x))


_global_act = nn.LeakyReLU(0.2)


def test_a_global_stateless_module_swapped_for_another_is_honoured():
    """Only a module handed in as a local is guarded by type: a global one keeps its identity
    guard, so another instance (another slope, a hook of its own) is seen."""
    global _global_act

    def f(x):
        return _global_act(x) * 2

    cf = capture(f, RecordingBackend())
    try:
        x = torch.randn(4, 4)
        torch.testing.assert_close(cf(x), f(x))
        _global_act = nn.LeakyReLU(0.2)
        _global_act.register_forward_hook(_add_three)
        x = torch.randn(4, 4)
        torch.testing.assert_close(cf(x), f(x))
        _global_act = nn.LeakyReLU(0.5)
        torch.testing.assert_close(cf(x), f(x))
    finally:
        _global_act = nn.LeakyReLU(0.2)


class _OwnSiLU(nn.Module):
    """transformers' ``SiLUActivation``: torch.nn's ``__init__``, a forward of its own."""

    def forward(self, x):
        return nn.functional.silu(x) + 1


class _OwnInit(nn.Module):
    def __init__(self):
        super().__init__()
        _OwnInit.made += 1

    def forward(self, x):
        return x * 3


_OwnInit.made = 0


def test_a_subclass_with_torch_nns_init_made_inside_the_forward_is_inlined():
    """``ACT2FN["silu"]`` makes a ``SiLUActivation`` in Mamba's forward: made once at capture
    time (its construction runs only torch.nn's code) and inlined, one graph. A class with an
    ``__init__`` of its own still breaks the graph, so that ``__init__`` runs on each call as in
    eager."""

    def f(x):
        return _OwnSiLU()(x) * 2

    be = RecordingBackend()
    cf = capture(f, be)
    for _ in range(2):
        x = torch.randn(3, 5)
        torch.testing.assert_close(cf(x), f(x))
    assert be.calls == 1

    def g(x):
        return _OwnInit()(x) + 1

    cg = capture(g, RecordingBackend())
    before = _OwnInit.made
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(cg(x), x * 3 + 1)
    assert _OwnInit.made - before == 3
