"""Patterns of model forwards mixing the constructs: helper objects built in the forward with
``super().__init__`` chains, ``__call__`` objects, decorators around methods, context managers
around control-flow operators, generators over submodules. One graph each, as in TorchDynamo."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program
from torch import nn

TRACE: list = []


def _reset():
    TRACE.clear()


def _observe():
    return list(TRACE)


class _Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        return t * self.k


class _Shifted(_Scaler):
    def __init__(self, k, shift):
        super().__init__(k)
        self.shift = shift

    def __call__(self, t):
        return super().__call__(t) + self.shift


class _Counter:
    def __init__(self):
        self.n = 0

    @property
    def double(self):
        return self.n * 2

    def bump(self):
        self.n += 1
        return self


def obj_callable_built_in_frame(x):
    return _Scaler(3.0)(x) + _Shifted(2.0, 1.0)(x)


def obj_super_init_chain(x):
    s = _Shifted(0.5, -1.0)
    return s(x) * s.k + s.shift


def obj_fluent_property(x):
    c = _Counter().bump().bump()
    return x * c.double + c.n


@contextlib.contextmanager
def _traced(tag):
    TRACE.append(tag)
    yield
    TRACE.append(f"/{tag}")


def cm_around_cond(x):
    with _traced("cond"):
        out = torch.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 2, (x,))
    return out


def cm_in_helper(x):
    def step(t, name):
        with _traced(name):
            return t.relu() + 1

    return step(step(x, "a"), "b")


def cm_yields_tensor_in_loop(x):
    @contextlib.contextmanager
    def scaled(t, k):
        yield t * k

    total = x
    for k in (1.0, 2.0, 3.0):
        with scaled(x, k) as s:
            total = total + s
    return total


def gen_over_submodules(x):
    layers = [nn.Identity(), nn.ReLU(), nn.Tanh()]

    def outputs(t):
        for layer in layers:
            t = layer(t)
            yield t

    return sum(outputs(x))


def cond_in_generator(x):
    def steps(t):
        for k in range(3):
            yield torch.cond(t.sum() > k, lambda a: a + 1, lambda a: a - 1, (t,))

    return torch.stack(list(steps(x)))


def map_in_contextmanager(xs):
    from torch._higher_order_ops.map import map as hmap

    with _traced("map"):
        return hmap(lambda x: x.cos(), xs)


def _timed(fn):
    @functools.wraps(fn)
    def wrapper(self, x):
        TRACE.append(fn.__name__)
        return fn(self, x)

    return wrapper


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @_timed
    def forward(self, x):
        return self.lin(x).relu()


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block(), _Block()])

    @property
    def depth(self):
        return len(self.blocks)

    def forward(self, x):
        for b in self.blocks:
            x = b(x) + x
        return x / self.depth


@dataclass
class _Out:
    hidden: torch.Tensor
    gated: torch.Tensor

    def __post_init__(self):
        self.total = self.hidden + self.gated


class _DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 4)

    def forward(self, x):
        o = _Out(x, torch.sigmoid(self.gate(x)))
        return o.total * 2


class _StaticAndClass(nn.Module):
    eps = 1e-5

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    @staticmethod
    def _norm(x, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    @classmethod
    def _eps(cls):
        return cls.eps

    def forward(self, x):
        return self._norm(x, self._eps()) * self.w


class _Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class _Gated(_Base):
    def forward(self, x):
        h = super().forward(x)
        return torch.cond(h.mean() > 0, lambda a: a.relu(), lambda a: a.tanh(), (h,))


PROGRAMS = [
    Program(obj_callable_built_in_frame),
    Program(obj_super_init_chain),
    Program(obj_fluent_property),
    Program(cm_around_cond, setup=_reset, observe=_observe),
    Program(cm_in_helper, setup=_reset, observe=_observe),
    Program(cm_yields_tensor_in_loop),
    Program(gen_over_submodules),
    Program(cond_in_generator),
    Program(map_in_contextmanager, lambda: (randn(5, 4),), setup=_reset, observe=_observe),
    Program(_Stack(), setup=_reset, observe=_observe),
    Program(_DataclassOut()),
    Program(_StaticAndClass()),
    Program(_Gated()),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
