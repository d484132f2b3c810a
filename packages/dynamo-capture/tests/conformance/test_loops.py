# ruff: noqa: PERF402, PLC0206, PLW0120
# (the programs spell these constructs on purpose: each is bytecode capture must handle)
"""for loops over range, lists, tuples, dict items, enumerate, zip, reversed and module containers."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, run_program, xy34
from torch import nn

torch.manual_seed(1234)


def for_range(x):
    for i in range(3):
        x = x + i
    return x


def for_range_start_stop_step(x):
    acc = x
    for i in range(1, 10, 3):
        acc = acc * 0.5 + i
    return acc


def for_range_negative_step(x):
    acc = x
    for i in range(4, 0, -1):
        acc = acc - i
    return acc


def for_range_shape(x):
    acc = torch.zeros_like(x[0])
    for i in range(x.shape[0]):
        acc = acc + x[i]
    return acc


def for_list_of_consts(x):
    for k in [0.5, 1.5, 2.5]:
        x = x * k
    return x


def for_list_of_tensors(x):
    out = 0
    for t in [x, x.cos(), x.sin()]:
        out = out + t
    return out


def for_tuple(x):
    for fn in (torch.relu, torch.tanh, torch.sigmoid):
        x = fn(x)
    return x


def for_dict_items(x):
    weights = {"a": 1.0, "b": 2.0}
    for name, w in weights.items():
        x = x * w if name == "b" else x + w
    return x


def for_dict_keys(x):
    d = {"p": x, "q": x * 2}
    out = []
    for k in d:
        out.append(d[k])
    return torch.cat(out)


def for_dict_values(x):
    d = {"p": x, "q": x * 2}
    return sum(v for v in d.values())


def for_enumerate(x):
    out = x
    for i, t in enumerate([x, x * 2]):
        out = out + t * i
    return out


def for_enumerate_start(x):
    out = x
    for i, t in enumerate((x, x), start=2):
        out = out * i + t
    return out


def for_zip(x, y):
    out = []
    for a, b in zip(x.unbind(0), y.unbind(0)):
        out.append(a * b)
    return torch.stack(out)


def for_zip_three(x, y):
    acc = 0
    for a, b, c in zip([x, y], [y, x], [1.0, 2.0]):
        acc = acc + a * b * c
    return acc


def for_reversed_list(x):
    out = []
    for t in reversed([x, x * 2, x * 3]):
        out.append(t)
    return out[0] - out[-1]


def for_reversed_range(x):
    acc = x
    for i in reversed(range(3)):
        acc = acc * 2 + i
    return acc


def for_unbind_tensor_iteration(x):
    acc = torch.zeros(4)
    for row in x:
        acc = acc + row
    return acc


def for_nested(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


def for_break(x):
    for i in range(10):
        if i == 3:
            break
        x = x + 1
    return x


def for_continue(x):
    for i in range(5):
        if i % 2 == 0:
            continue
        x = x * 2
    return x


def for_else(x):
    for i in range(3):
        x = x + i
    else:
        x = x * 10
    return x


def while_counter(x):
    i = 0
    while i < 4:
        x = x + 1
        i += 1
    return x


def while_shape_halving(x):
    n = x.shape[1]
    while n > 1:
        n //= 2
        x = x * 2
    return x


def for_string_chars(x):
    for ch in "ab":
        x = x + (1 if ch == "a" else 2)
    return x


def for_shape_tuple(x):
    total = 1
    for d in x.shape:
        total *= d
    return x / total


class LinearStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class ModuleListEnumerate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) * (i + 1)
        return x


class ModuleListIndexLen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x)
        return x + self.layers[-1].bias


class ModuleListSlice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers[1:3]:
            x = layer(x)
        return x


class ModuleListZip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.b = nn.ModuleList([nn.LayerNorm(4), nn.LayerNorm(4)])

    def forward(self, x):
        for lin, norm in zip(self.a, self.b):
            x = norm(lin(x))
        return x


class ModuleListReversed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for layer in reversed(self.layers):
            x = layer(x)
        return x


class SequentialCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))

    def forward(self, x):
        return self.body(x)


class SequentialIterate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))

    def forward(self, x):
        outs = []
        for m in self.body:
            x = m(x)
            outs.append(x)
        return torch.stack(outs)


class SequentialIndex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def forward(self, x):
        return self.body[2](self.body[0](x))


class ModuleDictItems(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        return {name: head(x) for name, head in self.heads.items()}


class ModuleDictKeyAccess(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"up": nn.Linear(4, 8), "down": nn.Linear(8, 4)})

    def forward(self, x):
        return self.heads["down"](self.heads["up"](x))


class ModuleDictValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleDict({"x": nn.Linear(4, 4), "y": nn.Linear(4, 4)})

    def forward(self, x):
        total = 0
        for m in self.branches.values():
            total = total + m(x)
        return total


class ModuleDictIterKeys(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleDict({"p": nn.Linear(4, 4), "q": nn.Linear(4, 4)})

    def forward(self, x):
        outs = []
        for k in self.branches:
            outs.append(self.branches[k](x))
        return torch.cat(outs, dim=-1)


class ParameterListLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(3)])

    def forward(self, x):
        for s in self.scales:
            x = x * s
        return x


PROGRAMS = [
    Program(for_range),
    Program(for_range_start_stop_step),
    Program(for_range_negative_step),
    Program(for_range_shape),
    Program(for_list_of_consts),
    Program(for_list_of_tensors),
    Program(for_tuple),
    Program(for_dict_items),
    Program(for_dict_keys),
    Program(for_dict_values),
    Program(for_enumerate),
    Program(for_enumerate_start),
    Program(for_zip, xy34),
    Program(for_zip_three, xy34),
    Program(for_reversed_list),
    Program(for_reversed_range),
    Program(for_unbind_tensor_iteration),
    Program(for_nested),
    Program(for_break),
    Program(for_continue),
    Program(for_else),
    Program(while_counter),
    Program(while_shape_halving),
    Program(for_string_chars),
    Program(for_shape_tuple),
    Program(LinearStack().eval()),
    Program(ModuleListEnumerate().eval()),
    Program(ModuleListIndexLen().eval()),
    Program(ModuleListSlice().eval()),
    Program(ModuleListZip().eval()),
    Program(ModuleListReversed().eval()),
    Program(SequentialCall().eval()),
    Program(SequentialIterate().eval()),
    Program(SequentialIndex().eval()),
    Program(ModuleDictItems().eval()),
    Program(ModuleDictKeyAccess().eval()),
    Program(ModuleDictValues().eval()),
    Program(ModuleDictIterKeys().eval()),
    Program(ParameterListLoop().eval()),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
