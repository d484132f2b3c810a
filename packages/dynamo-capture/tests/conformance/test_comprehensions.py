"""List, dict, set comprehensions and generator expressions (inlined in 3.12 by PEP 709)."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, run_program, xy34

FACTORS = [1.0, 2.0, 3.0]


def listcomp_range(x):
    return torch.stack([x * i for i in range(3)])


def listcomp_filter(x):
    return torch.stack([x + i for i in range(6) if i % 2 == 0])


def listcomp_nested(x):
    return sum([x * i * j for i in range(2) for j in range(3)])


def listcomp_over_tensors(x):
    return torch.cat([t.relu() for t in x.unbind(0)])


def listcomp_uses_closure_var(x):
    bias = 0.5
    return torch.stack([x + bias * k for k in FACTORS])


def listcomp_shadowing(x):
    i = 10
    vals = [i * 2 for i in range(3)]
    return x * i + vals[-1]


def listcomp_enumerate(x, y):
    return sum([t * i for i, t in enumerate([x, y])])


def listcomp_zip(x, y):
    return torch.stack([a - b for a, b in zip([x, y], [y, x])])


def listcomp_conditional_expr(x):
    return torch.stack([x if i == 0 else -x for i in range(3)])


def listcomp_nested_list(x):
    grid = [[x * (i + j) for j in range(2)] for i in range(2)]
    return grid[1][1] - grid[0][1]


def dictcomp(x):
    d = {f"k{i}": x * i for i in range(3)}
    return d["k2"] + d["k1"]


def dictcomp_items_transform(x):
    src = {"a": x, "b": x * 2}
    d = {k: v.sum() for k, v in src.items()}
    return d["a"] + d["b"]


def dictcomp_filter(x):
    d = {i: x + i for i in range(5) if i > 2}
    return d[3] * d[4]


def setcomp(x):
    s = {i % 3 for i in range(10)}
    return x * len(s)


def genexpr_sum(x):
    return sum(x * i for i in range(4))


def genexpr_tuple(x):
    return torch.stack(tuple(x + i for i in range(3)))


def genexpr_any_all_consts(x):
    sizes = [2, 4, 6]
    if all(s % 2 == 0 for s in sizes) and not any(s > 10 for s in sizes):
        return x + 1
    return x - 1


def genexpr_max_min(x):
    sizes = [3, 7, 5]
    return x * max(s for s in sizes) - min(s for s in sizes)


def listcomp_in_inlined_function(x):
    def helper(t):
        return [t * k for k in range(2)]

    a, b = helper(x)
    return a + b


def listcomp_of_shapes(x):
    dims = [d * 2 for d in x.shape]
    return x.repeat(1, 1).reshape(-1)[: dims[0]]


def listcomp_lambda_capture(x):
    fns = [lambda t, k=k: t * k for k in range(3)]
    return fns[2](x) + fns[1](x)


def comprehension_variable_after(x):
    data = [x, x * 2]
    out = [t + 1 for t in data]
    return out[0] + data[1]


PROGRAMS = [
    Program(listcomp_range),
    Program(listcomp_filter),
    Program(listcomp_nested),
    Program(listcomp_over_tensors),
    Program(listcomp_uses_closure_var),
    Program(listcomp_shadowing),
    Program(listcomp_enumerate, xy34),
    Program(listcomp_zip, xy34),
    Program(listcomp_conditional_expr),
    Program(listcomp_nested_list),
    Program(dictcomp),
    Program(dictcomp_items_transform),
    Program(dictcomp_filter),
    Program(setcomp),
    Program(genexpr_sum),
    Program(genexpr_tuple),
    Program(genexpr_any_all_consts),
    Program(genexpr_max_min),
    Program(listcomp_in_inlined_function),
    Program(listcomp_of_shapes),
    Program(listcomp_lambda_capture),
    Program(comprehension_variable_after),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
