# ruff: noqa: SIM201
# (the programs spell these constructs on purpose: each is bytecode capture must handle)
"""Conditional jumps on values known at capture time (constants, shapes, dtypes, flags), assert."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, run_program, x34, xy34
from torch import nn

USE_BIAS = True
MODE = "gelu"
LIMIT = None


def if_const_true(x):
    if True:
        return x + 1
    return x - 1


def if_const_local(x):
    flag = 0
    if flag:
        x = x * 100
    else:
        x = x - 100
    return x


def if_global_flag(x):
    if USE_BIAS:
        return x + 1
    return x


def if_global_string(x):
    if MODE == "relu":
        return torch.relu(x)
    elif MODE == "gelu":
        return torch.nn.functional.gelu(x)
    return x


def if_global_none(x):
    if LIMIT is not None:
        return x.clamp(max=LIMIT)
    return x * 3


def if_shape_dim(x):
    if x.shape[0] > 2:
        return x.sum(0)
    return x.sum(1)


def if_shape_equality(x, y):
    if x.shape == y.shape:
        return x + y
    return x


def if_ndim(x):
    if x.ndim == 2:
        return x.unsqueeze(0)
    return x


def if_dim_method(x):
    return x.t() if x.dim() == 2 else x


def if_dtype(x):
    if x.dtype == torch.float32:
        return x.double()
    return x


def if_is_floating_point(x):
    if x.is_floating_point():
        return x * 0.5
    return x // 2


def if_numel(x):
    if x.numel() > 100:
        return x * 0
    return x + x.numel()


def if_device(x):
    if x.device.type == "cpu":
        return x + 1
    return x - 1


def if_requires_grad(x):
    if x.requires_grad:
        return x * 2
    return x * 3


def if_isinstance(x):
    if isinstance(x, torch.Tensor):
        return x.neg()
    return x


def if_none_arg(x, mask=None):
    if mask is not None:
        x = x * mask
    return x + 1


def if_else_expression(x):
    n = x.shape[-1]
    return x * 2 if n % 2 == 0 else x * 3


def if_and_or(x):
    a, b = x.shape
    if a == 3 and (b == 5 or b == 4):
        return x + 1
    return x


def if_not(x):
    if not x.shape[0] == 3:
        return x
    return x - 1


def if_nested(x):
    if x.shape[0] == 3:
        if x.shape[1] == 4:
            return x * 10
        return x * 5
    return x


def if_elif_chain_int(x):
    n = x.shape[1]
    if n == 1:
        r = x
    elif n == 2:
        r = x * 2
    elif n == 4:
        r = x * 4
    else:
        r = x * 8
    return r


def if_len_list(x):
    items = [x, x]
    if len(items) == 2:
        return items[0] + items[1]
    return x


def if_empty_list_truthiness(x):
    items = []
    if items:
        return x
    return x + 2


def if_dict_truthiness(x):
    d = {"a": 1}
    return x * 2 if d else x


def if_tensor_shape_truthiness(x):
    if x.shape[0]:
        return x + 3
    return x


def if_ternary_chain(x):
    k = 2
    m = "a" if k == 1 else "b" if k == 2 else "c"
    return x * (10 if m == "b" else 1)


def assert_shape(x):
    assert x.shape[1] == 4, "expected 4 columns"
    return x * 2


def assert_const(x):
    n = 3
    assert n > 0
    assert isinstance(n, int)
    return x + n


def assert_dtype(x):
    assert x.dtype == torch.float32
    return x.exp()


def early_return_in_loop(x):
    for i in range(5):
        if i == 2:
            return x * i
    return x


def return_in_try_finally(x):
    try:
        y = x + 1
    finally:
        z = 2
    return y * z


def try_except_not_taken(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    return y


def walrus_on_shape(x):
    if (n := x.shape[0]) > 2:
        return x * n
    return x - n


def return_constant_after_input_mutation(x):
    x.mul_(2.0)
    return 3


class Gated(nn.Module):
    def __init__(self, use_gate: bool) -> None:
        super().__init__()
        self.use_gate = use_gate
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.use_gate:
            y = y * torch.sigmoid(y)
        return y


class TrainingBranch(nn.Module):
    def forward(self, x):
        if self.training:
            return x * 0.5
        return x * 2.0


class ConfigBranch(nn.Module):
    class Config:
        activation = "silu"
        residual = True
        eps = 1e-6

    def __init__(self) -> None:
        super().__init__()
        self.config = self.Config()

    def forward(self, x):
        y = torch.nn.functional.silu(x) if self.config.activation == "silu" else x
        if self.config.residual:
            y = y + x
        return y / (y.norm() + self.config.eps)


PROGRAMS = [
    Program(if_const_true),
    Program(if_const_local),
    Program(if_global_flag),
    Program(if_global_string),
    Program(if_global_none),
    Program(if_shape_dim),
    Program(if_shape_equality, xy34),
    Program(if_ndim),
    Program(if_dim_method),
    Program(if_dtype),
    Program(if_is_floating_point),
    Program(if_numel),
    Program(if_device),
    Program(if_requires_grad),
    Program(if_isinstance),
    Program(if_none_arg, x34, name="if_none_arg_omitted"),
    Program(if_none_arg, xy34, name="if_none_arg_given"),
    Program(if_else_expression),
    Program(if_and_or),
    Program(if_not),
    Program(if_nested),
    Program(if_elif_chain_int),
    Program(if_len_list),
    Program(if_empty_list_truthiness),
    Program(if_dict_truthiness),
    Program(if_tensor_shape_truthiness),
    Program(if_ternary_chain),
    Program(assert_shape),
    Program(assert_const),
    Program(assert_dtype),
    Program(early_return_in_loop),
    Program(walrus_on_shape),
    Program(return_constant_after_input_mutation),
    Program(return_in_try_finally),
    Program(try_except_not_taken),
    Program(Gated(True).eval(), name="GatedOn"),
    Program(Gated(False).eval(), name="GatedOff"),
    Program(TrainingBranch().train(), name="TrainingBranchTrain"),
    Program(TrainingBranch().eval(), name="TrainingBranchEval"),
    Program(ConfigBranch()),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
