"""Breaks where several contexts meet: a loop around a ``no_grad`` block around a breaking callee,
try/except inside a callee inside a loop, modules with tensor branches in a ModuleList, recursion
through ``no_grad``, while loops on tensors calling breaking functions.

Pieces that repeat with the same guards hit their entries (see README.md), which several of these
programs rely on; the comment above each gives the derivation.
"""

from __future__ import annotations

import torch
from _breaks_harness import g34, p34, program, register
from torch import nn

KIND = "combined"


def _twice_noisy(t):
    u = t * 2
    print("twice", u.requires_grad)
    return u + 1


# [x*1] | callee(t requires grad): [t*2] [u+1] | callee(t without grad): [t*2] (u+1 hits: u has
# no grad both times) | [y+x]
@program(graphs=5, inputs=g34, grad=True)
def loop_no_grad_around_breaking_callee(x):
    y = x * 1
    for _ in range(2):
        with torch.no_grad():
            y = _twice_noisy(y)
    return y + x


def _safe_item(t):
    try:
        return t.item()
    except RuntimeError:
        print("not a scalar")
        return -1


# [x+1] | callee (no tensor op) | [x+1] | callee | [x*total]
@program(graphs=3)
def loop_calls_callee_whose_try_catches_item(x):
    total = 0
    for _ in range(2):
        x = x + 1
        total += _safe_item(x)
    return x * total


class _Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.abs().sum() > 0:
            return h.relu()
        return h


class _GateStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = nn.ModuleList([_Gate() for _ in range(2)])

    def forward(self, x):
        for gate in self.gates:
            x = gate(x) + 1
        return x


def _gate_stack():
    torch.manual_seed(0)
    return _GateStack()


# gate 1: [lin abs sum gt] [relu] | [+1] | gate 2: [lin abs sum gt] (relu hits) | [+1]
register(_gate_stack, graphs=5, name="modulelist_of_gates_with_tensor_branches", kind=KIND)


def _noisy_mul(t, k):
    print("k", k)
    return t * k


# [t*1] [t*2] (one per k) | [x*outs[0] + outs[1]]
@program(graphs=3, inputs=g34, grad=True)
def comprehension_inside_no_grad(x):
    with torch.no_grad():
        outs = [_noisy_mul(x, k) for k in (1, 2)]
    return x * outs[0] + outs[1]


def _make_affine(w, b):
    def affine(t, *, scale=1.0):
        y = t * w
        print("affine", scale)
        return y * scale + b

    return affine


register(
    lambda: _make_affine(2.0, 0.5),
    graphs=2,
    name="closure_with_keyword_only_argument",
    kind=KIND,
    kwargs=lambda: {"scale": 3.0},
)


def _halve_until(t, n):
    if n == 0:
        return t
    with torch.no_grad():
        t = t * 0.5
        print("level", n)
    return _halve_until(t, n - 1)


# [abs] | level 2: [t*0.5] | level 1: [t*0.5] (level 0 does not break: inlined, no op) | [+1]
@program(graphs=4, inputs=g34, grad=True)
def recursion_through_no_grad(x):
    return _halve_until(x.abs(), 2) + 1


# [sum gt] | callee [t*2] [u+1] | [sum gt] (i=1) | callee hits | [sum gt] (i=2), then i < 2 fails
@program(graphs=5, inputs=p34)
def while_tensor_condition_calls_breaking_callee(x):
    i = 0
    while x.sum() > 0 and i < 2:
        x = _twice_noisy(x)
        i += 1
    return x


class _Logger:
    def __init__(self):
        self.lines = []

    def log(self, msg, t):
        self.lines.append(msg)
        print(msg, tuple(t.shape))


# [x*2] | log (no op) | [y.sum] | log | [+1]; the logger's lines are compared after the call
@program(graphs=3, inputs=lambda: (torch.randn(3, 4), _Logger()))
def user_object_argument_logs_between_ops(x, logger):
    y = x * 2
    logger.log("doubled", y)
    s = y.sum()
    logger.log("summed", s)
    return s + 1
