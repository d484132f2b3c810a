"""Breaks inside list/dict/set comprehensions and generator expressions.

On 3.11 a comprehension is its own function; on 3.12 (PEP 709) it is inlined. So that the graph
count does not depend on the version, each program here has a break (or no tensor operation)
right before and right after the comprehension's first and last tensor operations. Generator
bodies that break hold no tensor operation themselves (their tensor work is outside them).
"""

from __future__ import annotations

import torch
from _breaks_harness import program


def _noisy(t, k):
    print("k", k)
    return t * k


@program(graphs=5)
def listcomp_calls_breaking_function(x):
    x = x.abs()
    outs = [_noisy(x, i) for i in range(3)]
    return torch.stack(outs).sum(0)


@program(graphs=4)
def listcomp_print_in_condition(x):
    out = [x * i for i in range(3) if print(i) is None]
    print("done")
    return torch.stack(out)


@program(graphs=2)
def dictcomp_print_in_value(x):
    d = {k: (print(k), x * v)[1] for k, v in [("a", 1.0), ("b", 2.0)]}
    print("end")
    return d


@program(graphs=4)
def listcomp_of_item_values(x):
    vals = [(x[i] > -100).all().item() for i in range(3)]
    return x * sum(vals)


@program(graphs=2)
def genexpr_with_print_no_tensor_ops(x):
    y = x * 2
    total = sum(print(i) or i for i in range(3))
    return y + total


@program(graphs=1)
def genexpr_of_tensors_without_break(x):
    return sum(t * 2 for t in (x, x + 1))


@program(graphs=2)
def listcomp_without_break_then_print(x):
    ys = [x * i for i in range(3)]
    print(len(ys))
    return torch.cat(ys)


@program(graphs=3)
def nested_listcomp_same_values_hit_cache(x):
    rows = [[_noisy(x, i * j) for j in range(2)] for i in range(2)]
    return torch.stack([torch.stack(r) for r in rows])


@program(graphs=2)
def setcomp_with_print_between_ops(x):
    y = x + 1
    s = {print(i) or i % 2 for i in range(4)}
    return y * len(s)


@program(graphs=2)
def listcomp_over_tolist_of_bools(x):
    y = x.cos()
    flags = (y > -100).tolist()
    n = sum(1 for row in flags for v in row if v)
    return y * n


def _gen_scales(n):
    for i in range(n):
        print("yield", i)
        yield i * 0.5


@program(graphs=2)
def generator_function_that_prints(x):
    y = x.exp()
    scales = list(_gen_scales(3))
    return y * sum(scales)


def _gen_pure(n):
    for i in range(n):
        yield i + 1


@program(graphs=2)
def pure_generator_then_print(x):
    for s in _gen_pure(3):
        x = x * s
    print("after the generator")
    return x - 1


@program(graphs=3)
def dictcomp_calls_breaking_function(x):
    d = {name: _noisy(x, k) for name, k in (("one", 1), ("two", 2))}
    print(sorted(d))
    return d["one"] + d["two"]


@program(graphs=1)
def any_over_genexpr_with_print(x):
    found = any(print(i) or i == 2 for i in range(4))
    return x * 2 if found else x
