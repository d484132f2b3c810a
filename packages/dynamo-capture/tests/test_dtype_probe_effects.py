"""The dtype probe (``_dtype_probe``) runs real ops at capture time on tensors of its own: it must
have no effect a user could see. Random ops (even those drawing in Python, under names no list
catches: ``F.gumbel_softmax``, ``F.fractional_max_pool2d``, ``F.rrelu``), writes to tensors it
did not make and ops that are not torch's own (a user's custom op, a collective) are not run.
Each capture test runs the graph as captured (ATen ops, as eager) with the same seed as eager:
outputs and the generator's state after the call must both be eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture._dtype_probe import _Effect, _EffectFree, kernel_missing


def _as_is(gm, example_inputs):
    return gm.forward


CASES = {
    "gumbel_softmax": lambda x: F.gumbel_softmax(x.reshape(4, 16), tau=0.7) * 2,
    "fractional_max_pool2d": lambda x: (
        F.fractional_max_pool2d(x.reshape(1, 1, 8, 8), 2, output_size=(4, 4)) + 1
    ),
    "rrelu": lambda x: F.rrelu(x, 0.1, 0.3, training=True) - 1,
    "dropout": lambda x: F.dropout(x, 0.4) * 3,
    "rand_like": lambda x: torch.rand_like(x) + x,
    "bernoulli": lambda x: torch.bernoulli(x.abs().clamp(max=1)) + x,
    "poisson": lambda x: torch.poisson(x.abs()) + 1,
    "normal_": lambda x: (x * 1).normal_() + x,
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_capture_leaves_the_generator_as_eager_does(name, dtype):
    f = CASES[name]
    x = torch.randn(64).to(dtype)
    torch.manual_seed(1234)
    try:
        want, want_err = f(x), None
    except NotImplementedError as e:  # eager has no kernel for this dtype: the call must raise too
        want, want_err = None, type(e)
    want_state = torch.get_rng_state()
    cf = capture(f, _as_is)
    torch.manual_seed(1234)
    if want_err is not None:
        with pytest.raises(want_err):
            cf(x)
    else:
        got = cf(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.equal(torch.get_rng_state(), want_state), "capture moved the generator"
    # captured once: a second call with the same seed repeats eager's sequence too
    torch.manual_seed(99)
    if want_err is None:
        want = f(x)
        want_state = torch.get_rng_state()
        torch.manual_seed(99)
        torch.testing.assert_close(cf(x), want, rtol=0, atol=0)
        assert torch.equal(torch.get_rng_state(), want_state)


def test_the_probe_refuses_writes_to_tensors_it_did_not_make():
    user = torch.arange(4)
    own = torch.zeros(2, dtype=torch.int64)
    with _EffectFree([own]):
        own.add_(1)  # its own tensor: fine
        view = own[:1]
        view.mul_(3)  # a view of it too
        made = own + 1
        made.sub_(1)  # and what its ops returned
        with pytest.raises(_Effect):
            user.add_(1)
        with pytest.raises(_Effect):
            torch.add(own, own, out=user)
    torch.testing.assert_close(user, torch.arange(4))
    torch.testing.assert_close(own, torch.tensor([3, 1]))


def test_the_probe_refuses_random_ops_before_they_draw():
    own = torch.zeros(3, dtype=torch.float16)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    with _EffectFree([own]):
        for draw in (
            lambda: own.uniform_(),
            lambda: torch.rand(3),
            lambda: torch.bernoulli(own),
            lambda: F.gumbel_softmax(own.float()),
        ):
            with pytest.raises(_Effect):
                draw()
    assert torch.equal(torch.get_rng_state(), state)


_calls = []


@torch.library.custom_op("tk_probe_test::count_calls", mutates_args=())
def _count_calls(x: torch.Tensor) -> torch.Tensor:
    _calls.append(x.shape)  # a user-visible effect the probe must not cause
    return x.clone()


@_count_calls.register_fake
def _(x):
    return torch.empty_like(x)


def test_the_probe_never_runs_a_users_custom_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = torch.empty(5, 3, dtype=torch.int32)
    del mode
    _calls.clear()
    assert (
        kernel_missing("call_function", torch.ops.tk_probe_test.count_calls.default, [fake], {})
        is None
    )
    assert kernel_missing("call_function", torch.ops.tk_probe_test.count_calls, [fake], {}) is None
    assert _calls == []
    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    cf = capture(lambda t: torch.ops.tk_probe_test.count_calls(t) * 2, _as_is)
    torch.testing.assert_close(cf(x), x * 2)
    assert len(_calls) == 1  # the call itself, once


def test_the_probe_still_finds_a_missing_kernel():
    """The dispatch mode must not hide eager's own dtype error (a long softmax has no kernel)."""

    def f(x):
        return x.softmax(0) + 1

    x = torch.arange(6)
    with pytest.raises(NotImplementedError) as want:
        f(x)
    with pytest.raises(NotImplementedError) as got:
        capture(f, _as_is)(x)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
