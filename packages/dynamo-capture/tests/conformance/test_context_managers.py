"""with torch.no_grad() / enable_grad() / set_grad_enabled / autocast(...), and grad-mode state."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program
from torch import nn

torch.manual_seed(99)


def grad_x():
    return (randn(3, 4).requires_grad_(),)


def grad_xy():
    return (randn(3, 4).requires_grad_(), randn(4, 5))


def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    return y + x


def no_grad_whole(x):
    with torch.no_grad():
        return x.sin() * 3


def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    return a, b


def set_grad_enabled_false(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return y


def set_grad_enabled_true(x):
    with torch.set_grad_enabled(True):
        y = x.exp()
    return y


def no_grad_then_grad_again(x):
    with torch.no_grad():
        a = x + 1
    b = x + 1
    return a * 2, b * 2


def is_grad_enabled_branch(x):
    with torch.no_grad():
        if torch.is_grad_enabled():
            return x * 100
        return x - 1


def no_grad_nested_function(x):
    def helper(t):
        with torch.no_grad():
            return t * 5

    return helper(x) + x


def no_grad_matmul(x, w):
    with torch.no_grad():
        return x @ w


def autocast_cpu_bf16_matmul(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y


def autocast_cpu_dtype_after(x, w):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        y = torch.mm(x, w)
    return y.float() + 1


def autocast_disabled(x, w):
    with torch.autocast("cpu", enabled=False):
        return x @ w


def autocast_nested_disable(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            b = x @ w
    return a, b


def inference_style_no_grad_detach(x):
    with torch.no_grad():
        y = x.detach() * 2
    return y


class NoGradModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            frozen = self.lin(x)
        return frozen + self.lin(x)


PROGRAMS = [
    Program(no_grad_block, grad_x),
    Program(no_grad_whole, grad_x),
    Program(enable_grad_inside_no_grad, grad_x),
    Program(set_grad_enabled_false, grad_x),
    Program(set_grad_enabled_true, grad_x),
    Program(no_grad_then_grad_again, grad_x),
    Program(is_grad_enabled_branch, grad_x),
    Program(no_grad_nested_function, grad_x),
    Program(no_grad_matmul, grad_xy),
    Program(autocast_cpu_bf16_matmul, grad_xy, rtol=2e-2, atol=2e-2),
    Program(autocast_cpu_dtype_after, grad_xy, rtol=2e-2, atol=2e-2),
    Program(autocast_disabled, grad_xy),
    Program(autocast_nested_disable, grad_xy, rtol=2e-2, atol=2e-2),
    Program(inference_style_no_grad_detach, grad_x),
    Program(NoGradModule()),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
