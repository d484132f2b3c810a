"""Breaks inside loops: every iteration is cut; loops stay at <= 5 iterations (recompile limit 8).

Each iteration's continuation carries the loop state (the counter, the iterator's remaining
items), which is guarded, so each iteration compiles its own entry; a second call with the same
Python values hits all of them.
"""

from __future__ import annotations

import torch
from _breaks_harness import g34, p34, program


@program(graphs=4)
def print_after_op_in_for(x):
    for i in range(3):
        x = x + i
        print(i)
    return x * 2


@program(graphs=3)
def print_before_op_in_for(x):
    for i in range(3):
        print(i)
        x = x * 2
    return x


@program(graphs=3)
def ops_before_loop_and_after(x):
    y = x.sin()
    for i in range(2):
        print("it", i)
        y = y + 1
    return y.cos()


@program(graphs=3)
def break_on_even_iterations_only(x):
    for i in range(4):
        x = x + 1
        if i % 2 == 0:
            print("even", i)
    return x


@program(graphs=4)
def loop_over_list_of_tensors(x):
    outs = []
    for t in [x, x * 2, x * 3]:
        print(t.shape)
        outs.append(t.sum())
    return torch.stack(outs)


@program(graphs=4)
def loop_over_rows_by_index(x):
    acc = torch.zeros(4)
    for i in range(x.shape[0]):
        row = x[i]
        print("row", i)
        acc = acc + row
    return acc


@program(graphs=3)
def while_python_counter(x):
    i = 0
    while i < 3:
        x = x.relu() + 1
        print(i)
        i += 1
    return x


@program(graphs=4)
def loop_with_continue(x):
    for i in range(4):
        if i == 1:
            continue
        x = x * 2
        print(i)
    return x.sum()


@program(graphs=4)
def loop_with_break_statement(x):
    for i in range(5):
        x = x + 1
        print(i)
        if i == 2:
            break
    return x * 3


@program(graphs=5)
def nested_loops_print_inner(x):
    for i in range(2):
        for j in range(2):
            x = x + i * j + 1
            print(i, j)
    return x - 1


@program(graphs=3, inputs=lambda: (torch.randn(3, 4), []))
def loop_appends_to_list_argument(x, log):
    y = x
    for i in range(3):
        y = x * i
        log.append(i)
        print(len(log))
    return y


@program(graphs=4, inputs=p34)
def loop_data_dependent_branch_each_iteration(x):
    for _ in range(3):
        if x.sum() > 0:
            x = x * 0.5
    return x


@program(graphs=4)
def loop_item_each_iteration(x):
    for _ in range(3):
        n = (x > -100).sum().item()
        x = x + n
    return x


@program(graphs=2)
def loop_enumerate_constants(x):
    for i, s in enumerate([0.5, 2.0]):
        print(i, s)
        x = x * s
    return x + 1


@program(graphs=3)
def loop_zip_constants(x):
    for a, b in zip([1, 2], [3, 4]):
        x = x * a
        print(b)
    return x.sum()


@program(graphs=2)
def loop_dict_items(x):
    for k, v in {"a": 1.0, "b": 2.0}.items():
        print(k)
        x = x + v
    return x


@program(graphs=6)
def loop_five_iterations(x):
    for i in range(5):
        x = x * 0.9 + i
        print("step", i)
    return x.mean()


@program(graphs=3)
def loop_reversed_range(x):
    for i in reversed(range(3)):
        print(i)
        x = x - i
    return x


def _show(t):
    print("shape", tuple(t.shape))


@program(graphs=3)
def loop_calls_breaking_helper(x):
    for _ in range(2):
        x = x * 2
        _show(x)
    return x + 1


@program(graphs=4)
def loop_accumulates_python_and_tensor(x):
    total = 0
    acc = x * 0
    for i in range(1, 4):
        total += i
        print("total", total)
        acc = acc + x * total
    return acc, total


@program(graphs=2)
def loop_unrolled_then_single_break(x):
    for i in range(3):
        x = x + i
    print("after the loop")
    for i in range(2):
        x = x * (i + 1)
    return x


@program(graphs=3, inputs=g34, grad=True)
def loop_with_break_keeps_autograd_across_graphs(x):
    for i in range(3):
        x = x * 1.5
        print(i, x.requires_grad)
    return x


@program(graphs=3, inputs=lambda: (torch.randn(3, 4), [1, 2, 3]))
def while_list_not_empty_pops_across_breaks(x, lst):
    while lst:
        v = lst.pop()
        x = x * v
        print("popped", v)
    return x


@program(graphs=2)
def for_else_with_break_in_else(x):
    for i in range(2):
        x = x + i
        if i == 5:
            break
    else:
        print("loop finished")
        x = x * 2
    return x


@program(graphs=1)
def lambdas_made_in_a_loop_share_the_cell(x):
    fs = []
    for i in range(3):
        fs.append(lambda t: t * i)  # noqa: B023  (late binding is the point)
    print("made")
    return fs[0](x) + fs[1](x)


# Iterating a tensor: whether rows come from one unbind before the loop, a getitem per iteration,
# or an eager next() each time, the pieces are [zeros (+rows)] [add] [add] [add].
@program(graphs=4)
def loop_over_tensor_rows_directly(x):
    acc = torch.zeros(4)
    for row in x:
        print("row")
        acc = acc + row
    return acc
