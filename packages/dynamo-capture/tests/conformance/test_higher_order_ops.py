"""Control-flow operators: ``torch.cond``, ``while_loop`` and ``map`` captured as one node of the
higher-order operator in one graph, the branch / body functions as subgraph modules.

Programs whose predicate is a tensor run both ways: ``make_inputs`` draws the sign at random, and
``test_both_branches`` runs every cond program on inputs that take each branch, with no recompile
(the predicate is a graph value, not a guard).
"""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import (
    Program,
    RecordingBackend,
    compile_with,
    ids,
    randn,
    run_program,
    x34,
    xy34,
)
from torch._higher_order_ops.map import map as hmap
from torch._higher_order_ops.while_loop import while_loop

W = torch.randn(4, 4)
SCALE = 3.0
CALLS: list = []


def _t_sin(x):
    return x.sin()


def _f_cos(x):
    return x.cos()


# ----------------------------------------------------------------------------- cond


def cond_basic(x):
    return torch.cond(x.sum() > 0, _t_sin, _f_cos, (x,))


def cond_nested_functions(x, y):
    def t(a, b):
        return a * b + 1

    def f(a, b):
        return a - b

    return torch.cond(x.mean() > 0, t, f, (x, y))


def cond_closure_tensor(x):
    bias = x.amax(0)

    def t(a):
        return a + bias

    def f(a):
        return a - bias * 2

    return torch.cond(x.sum() > 0, t, f, (x,))


def cond_global_tensor_and_number(x):
    def t(a):
        return a @ W * SCALE

    def f(a):
        return a.relu()

    return torch.cond(x.sum() > 0, t, f, (x,))


def cond_tuple_output(x):
    def t(a):
        return a + 1, a * 2

    def f(a):
        return a - 1, a / 2

    p, q = torch.cond(x.sum() > 0, t, f, (x,))
    return p * q


def cond_list_operands(x, y):
    return torch.cond(y.max() > 1, lambda a, b: a + b, lambda a, b: a * b, [x, y])


def cond_lambdas(x):
    return torch.cond(x[0, 0] > 0, lambda a: a.exp(), lambda a: a.abs(), (x,)) * 2


def cond_before_and_after(x, y):
    h = x.tanh() + y
    out = torch.cond(h.sum() > 0, _t_sin, _f_cos, (h,))
    return out.sum(1) + h.mean()


def cond_nested_cond(x):
    def outer_true(a):
        return torch.cond(a.mean() > 0.1, lambda b: b * 3, lambda b: b + 3, (a,))

    return torch.cond(x.sum() > 0, outer_true, _f_cos, (x,))


def cond_pred_bool_python(x):
    flag = x.shape[0] > 2  # known at capture: the chosen branch is inlined
    return torch.cond(flag, _t_sin, _f_cos, (x,))


def cond_pred_0d_bool_input(x, p):
    return torch.cond(p, _t_sin, _f_cos, (x,))


def cond_kwargs(x):
    return torch.cond(pred=x.sum() > 0, true_fn=_t_sin, false_fn=_f_cos, operands=(x,))


def cond_in_loop(x):
    for _ in range(3):
        x = torch.cond(x.sum() > 0, lambda a: a - 1, lambda a: a + 1, (x,))
    return x


def cond_branch_calls_helper(x):
    def helper(a, k):
        return a * k + a.sum(0, keepdim=True)

    return torch.cond(x.sum() > 0, lambda a: helper(a, 2), lambda a: helper(a, -1), (x,))


def cond_reduces_shape(x):
    return torch.cond(x.sum() > 0, lambda a: a.sum(0), lambda a: a.mean(0), (x,))


class CondModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x):
        return torch.cond(x.sum() > 0, self.a, lambda t: self.b(t) + self.shift, (x,)).relu()


class CondMethodBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def up(self, x):
        return x * self.w

    def down(self, x):
        return x - self.w

    def forward(self, x):
        return torch.cond(x.mean() > 0, self.up, self.down, (x,))


def cond_higher_order_op_directly(x):
    def t(a):
        return (a + 1,)

    def f(a):
        return (a - 1,)

    (out,) = torch.ops.higher_order.cond(x.sum() > 0, t, f, (x,))
    return out


def _signed():
    x = randn(3, 4)
    return (x if torch.rand(()) < 0.5 else -x,)


def _signed_xy():
    return (*_signed(), randn(3, 4))


# ----------------------------------------------------------------------------- while_loop


def while_counter(x):
    def cond_fn(i, a):
        return i < 4

    def body_fn(i, a):
        return i + 1, a * 1.5 + 1

    i, a = while_loop(cond_fn, body_fn, (torch.tensor(0), x))
    return i, a


def while_data_dependent(x):
    # halve until the norm is small: the trip count depends on the data
    def cond_fn(a):
        return a.abs().sum() > 1.0

    def body_fn(a):
        return (a / 2,)

    (out,) = while_loop(cond_fn, body_fn, (x,))
    return out


def while_closure(x, y):
    step = y.mean(0)

    def cond_fn(i, a):
        return i < 3

    def body_fn(i, a):
        return i + 1, a + step

    return while_loop(cond_fn, body_fn, (torch.tensor(0), x))[1]


def while_op_directly(x):
    def cond_fn(i, a):
        return i < 2

    def body_fn(i, a):
        return i + 1, a.cos()

    return torch.ops.higher_order.while_loop(cond_fn, body_fn, (torch.tensor(0), x), ())[1]


def while_then_more(x):
    h = x * 2
    _, h = while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a.sin()), (torch.tensor(0), h))
    return h.sum(0)


class WhileModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        def body(i, a):
            return i + 1, torch.tanh(self.lin(a))

        return while_loop(lambda i, a: i < 3, body, (torch.tensor(0), x))[1]


# ----------------------------------------------------------------------------- map


def map_basic(xs):
    return hmap(lambda x: x.sin() * 2, xs)


def map_with_args(xs, y):
    def body(x, y):
        return x * y + 1

    return hmap(body, xs, y)


def map_tuple_out(xs):
    def body(x):
        return x + 1, x.sum()

    a, b = hmap(body, xs)
    return a * b.unsqueeze(-1)


def map_closure(xs, y):
    def body(x):
        return x @ W + y

    return hmap(body, xs)


def map_cond_inside(xs):
    def body(x):
        return torch.cond(x.sum() > 0, lambda a: a * 2, lambda a: -a, (x,))

    return hmap(body, xs)


def map_tuple_xs(xs, ys):
    def body(pair):
        a, b = pair
        return a * b

    return hmap(body, (xs, ys))


def cond_branches_differ_in_size(x):
    # the result's first dim is 2 or 3 by the predicate: an unbacked size (TorchDynamo keeps it
    # in the graph; torchkiln's static capture retries with a ShapeEnv for it)
    return torch.cond(x.sum() > 0, lambda a: a[:2] * 2, lambda a: a.cos(), (x,))


def cond_sized_result_used_after(x):
    y = torch.cond(x.sum() > 0, lambda a: a[1:] + 1, lambda a: a * 3, (x,))
    return y.relu().sum(0) * y.shape[0]


def cond_branches_return_different_operands(x, y):
    return torch.cond(x.sum() > 0, lambda a, b: a.sin(), lambda a, b: b.cos(), (x, y))


def _signed_x_y54():
    return (*_signed(), randn(5, 4))


def _xs():
    return (randn(5, 4),)


def _xs_y():
    return (randn(5, 4), randn(4))


def _xs_ys():
    return (randn(5, 4), randn(5, 4))


COND_PROGRAMS = [
    Program(cond_basic, _signed),
    Program(cond_nested_functions, _signed_xy),
    Program(cond_closure_tensor, _signed),
    Program(
        cond_global_tensor_and_number, lambda: (randn(3, 4) * (1 if torch.rand(()) < 0.5 else -1),)
    ),
    Program(cond_tuple_output, _signed),
    Program(cond_list_operands, xy34),
    Program(cond_lambdas, _signed),
    Program(cond_before_and_after, xy34),
    Program(cond_nested_cond, _signed),
    Program(
        cond_pred_0d_bool_input, lambda: (randn(3, 4), torch.tensor(bool(torch.rand(()) < 0.5)))
    ),
    Program(cond_kwargs, _signed),
    Program(cond_in_loop, _signed),
    Program(cond_branch_calls_helper, _signed),
    Program(cond_reduces_shape, _signed),
    Program(CondModule(), _signed),
    Program(CondMethodBranches(), _signed),
    Program(cond_higher_order_op_directly, _signed),
    Program(cond_branches_differ_in_size, _signed),
    Program(cond_sized_result_used_after, _signed),
    Program(cond_branches_return_different_operands, _signed_x_y54),
]
PROGRAMS = COND_PROGRAMS + [
    Program(cond_pred_bool_python, x34),
    Program(while_counter, x34),
    Program(while_data_dependent, lambda: (randn(3, 4) * 4,)),
    Program(while_closure, xy34),
    Program(while_op_directly, x34),
    Program(while_then_more, x34),
    Program(WhileModule(), x34),
    Program(map_basic, _xs),
    Program(map_with_args, _xs_y),
    Program(map_tuple_out, _xs),
    Program(map_closure, _xs_y),
    Program(map_cond_inside, _xs),
    Program(map_tuple_xs, _xs_ys),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)


@pytest.mark.parametrize("program", COND_PROGRAMS, ids=ids(COND_PROGRAMS))
def test_both_branches(program: Program) -> None:
    """Inputs taking each branch hit the same entry: the predicate is data in the graph."""
    backend = RecordingBackend()
    compiled = compile_with(program.fn, backend)
    for sign in (1.0, -1.0, 1.0, -1.0):
        args = tuple(
            a * sign if a.is_floating_point() else ~a if a.dtype == torch.bool else a
            for a in program.make_inputs()
        )
        torch.testing.assert_close(compiled(*args), program.fn(*args))
    assert backend.calls == 1


def test_branch_that_mutates_outside_state_is_refused():
    from torchkiln_dynamo_capture import Unsupported, capture

    def f(x):
        def t(a):
            CALLS.append(1)
            return a + 1

        return torch.cond(x.sum() > 0, t, _f_cos, (x,))

    with pytest.raises(Unsupported, match="mutates outside state"):
        capture(f, RecordingBackend(), fullgraph=True)(randn(3, 4))
    assert CALLS == []


def test_branches_with_different_outputs_are_refused():
    from torchkiln_dynamo_capture import Unsupported, capture

    def f(x):
        return torch.cond(x.sum() > 0, lambda a: (a, a), lambda a: a, (x,))

    with pytest.raises(Unsupported, match="different structures"):
        capture(f, RecordingBackend(), fullgraph=True)(randn(3, 4))


def test_graph_holds_one_cond_node():
    backend = RecordingBackend()
    compile_with(cond_before_and_after, backend)(*xy34())
    (gm,) = backend.graphs
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.higher_order.cond) == 1
    subgraphs = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert (
        all(isinstance(getattr(gm, t), torch.fx.GraphModule) for t in subgraphs)
        and len(subgraphs) == 2
    )


@pytest.mark.parametrize(
    ("fn", "reference"),
    [
        (
            lambda x: torch.cond(x.sum() > 0, lambda a: a, lambda a: a + 1, (x,)),
            lambda x: (x if x.sum() > 0 else x + 1).clone(),
        ),
        (
            lambda x: torch.cond(x.sum() > 0, lambda a: a.t(), lambda a: a.t() * 2, (x,)),
            lambda x: x.t().clone() if x.sum() > 0 else x.t() * 2,
        ),
        (
            lambda x: torch.cond(x.sum() > 0, lambda a: W, lambda a: a @ W, (x @ W,)),
            lambda x: W.clone() if x.sum() > 0 else (x @ W) @ W,
        ),
    ],
    ids=["identity_branch", "view_branch", "outside_tensor_branch"],
)
def test_branch_outputs_aliasing_inputs_are_copies(fn, reference):
    """A branch returning its input, a view of it or a tensor from outside: the subgraph outputs
    a copy (the operator refuses aliasing outputs; eager torch.cond 2.13 raises on these, so the
    reference is written by hand). Results are fresh tensors with the branch's values."""
    backend = RecordingBackend()
    compiled = compile_with(fn, backend)
    for sign in (1.0, -1.0):
        x = torch.randn(4, 4) * sign
        got = compiled(x)
        torch.testing.assert_close(got, reference(x))
        assert got.data_ptr() not in (x.data_ptr(), W.data_ptr())
    assert backend.calls == 1


def test_non_tensor_operands_raise_like_eager():
    from torchkiln_dynamo_capture import Unsupported, capture

    def f(x):
        return torch.cond(x.sum() > 0, lambda a, k: a * k, lambda a, k: a + k, (x, 3))

    with pytest.raises(Unsupported, match="not tensors"):
        capture(f, RecordingBackend(), fullgraph=True)(randn(3, 4))
