"""Helpers shared by the guard tests."""

import inspect

import pytest
from torchkiln_guards import compile_guards


def build(fn, guards, closure=None):
    """Compile ``guards`` against ``fn``'s signature, globals and (optionally) closure cells."""
    if closure is None and fn.__closure__:
        closure = dict(zip(fn.__code__.co_freevars, fn.__closure__))
    return compile_guards(
        guards, signature=inspect.signature(fn), f_globals=fn.__globals__, closure=closure
    )


def expect_pass(cg, *args, **kwargs):
    assert cg.check(*args, **kwargs) is True
    assert cg.explain_failure(*args, **kwargs) is None


def expect_fail(cg, reason, *args, **kwargs):
    """The fast check rejects the call and the slow path names the same reason."""
    assert cg.check(*args, **kwargs) is False
    failure = cg.explain_failure(*args, **kwargs)
    assert failure is not None
    if reason is not None:
        assert str(failure) == reason
    return failure


class _Helpers:
    build = staticmethod(build)
    expect_pass = staticmethod(expect_pass)
    expect_fail = staticmethod(expect_fail)


@pytest.fixture
def h():
    """build / expect_pass / expect_fail (tests run under --import-mode=importlib)."""
    return _Helpers
