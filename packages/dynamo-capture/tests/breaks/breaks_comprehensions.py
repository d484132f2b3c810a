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


# [abs] | _noisy at i=0 [t*0], at i=1 recompiled with i symbolic [t*i], reused at i=2 | [stack+sum]
# (automatic dynamic on the int argument; TorchDynamo: 4 as well)
@program(graphs=4)
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


# [sin] | print a | [y*1] | print b | [y*2] | print c | [y*3] | print built | [add]
@program(graphs=5)
def dictcomp_over_dict_items_with_print(x):
    scales = {"a": 1.0, "b": 2.0, "c": 3.0}
    y = x.sin()
    d = {k: (print(k), y * v)[1] for k, v in scales.items()}
    print("built")
    return d["a"] + d["c"]


# [x*2] | print 1 0 | [y*1] | print 1 1 | [y*2] | print 2 0 | [y*2] | print 2 1 | [y*3] | print | [stack]
# (the third piece is no cache hit: its continuation reads i and j, which changed)
@program(graphs=6)
def nested_listcomp_break_in_inner(x):
    y = x * 2
    grid = [[(print(i, j), y * (i + j))[1] for j in range(2)] for i in range(1, 3)]
    print("grid")
    return torch.stack([torch.stack(r) for r in grid]).sum(0)


def _gen_steps(n):
    for i in range(n):
        print("gen", i)
        yield i


# [x+1] | the generator and the comprehension run interleaved in Python (taking the generator's
# items ahead would print "gen 0..2" first); no tensor operation after them
@program(graphs=1)
def listcomp_over_printing_generator(x):
    y = x + 1
    scales = [s * 2 for s in _gen_steps(3) if print("use", s) is None]
    print("done")
    return y, scales


# [x*0] | print 1 | [t+x*1] | print 2 | [t+x*2] | print 3 | [t+x*3] | print | [total + outs[0]]
# (the walrus stores to the enclosing frame's cell: the comprehension gets that cell itself)
@program(graphs=5)
def listcomp_walrus_updates_enclosing_cell(x):
    total = x * 0
    outs = [(print(k), total := total + x * k)[1] for k in (1.0, 2.0, 3.0)]
    print("total")
    return total + outs[0]
