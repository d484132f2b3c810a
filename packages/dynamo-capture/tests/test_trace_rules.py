"""torch.ops callables, custom operators, disable / allow_in_graph / mark_dynamic / is_compiling:
each program is checked against eager, with the graph count and breaks capture reports."""

from __future__ import annotations

import torch
from torchkiln_dynamo_capture import allow_in_graph, capture, disable, mark_dynamic, mark_static

aten = torch.ops.aten


class Recording:
    """A backend that records each graph and runs it as traced."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.inputs: list[list] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.inputs.append(example_inputs)
        return gm.forward


def targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_aten_overload_packets_and_overloads_stay_in_one_graph():
    def f(a, b):
        return (
            aten.div(a, b, rounding_mode="floor")
            + torch.ops.aten.mul.Tensor(a, b)
            + aten.sin.default(a)
        )

    be = Recording()
    cf = capture(f, be)
    a, b = torch.randn(5) * 4, torch.randn(5) + 3
    torch.testing.assert_close(cf(a, b), f(a, b))
    assert len(be.graphs) == 1 and cf.graph_breaks == []
    assert aten.mul.Tensor in targets(be.graphs[0])


def test_prims_namespace_call():
    def f(a):
        return torch.ops.prims.sin.default(a) * 2

    be = Recording()
    a = torch.randn(6)
    torch.testing.assert_close(capture(f, be)(a), f(a))
    assert len(be.graphs) == 1


torch.library.define("tktest::twice_plus", "(Tensor x, Tensor y) -> Tensor")


@torch.library.impl("tktest::twice_plus", "CompositeExplicitAutograd")
def _twice_plus(x, y):
    return x * 2 + y


@torch.library.register_fake("tktest::twice_plus")
def _twice_plus_fake(x, y):
    return torch.empty_like(x)


def test_library_defined_custom_op_in_graph():
    def f(a, b):
        return torch.ops.tktest.twice_plus(a.cos(), b).relu()

    be = Recording()
    a, b = torch.randn(7), torch.randn(7)
    torch.testing.assert_close(capture(f, be)(a, b), f(a, b))
    assert len(be.graphs) == 1
    assert any("twice_plus" in str(t) for t in targets(be.graphs[0]))


def test_disabled_helper_runs_eagerly_between_graphs():
    calls = []

    @torch.compiler.disable
    def helper(x):
        calls.append(torch.compiler.is_compiling())
        return x.numpy().sum() + 0 * x  # numpy: would break anyway; disable keeps it out entirely

    @disable
    def ours(x):
        calls.append("ours")
        return x * 3

    def f(x):
        y = x.sin()
        y = helper(y)
        return ours(y).cos()

    be = Recording()
    cf = capture(f, be)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    # neither disabled helper was traced: no graph holds numpy's sum or the *3
    assert all(torch.Tensor.numpy not in targets(g) for g in be.graphs)
    assert len(cf.graph_breaks) == 2
    calls.clear()
    cf(x)
    assert calls == [False, "ours"]  # run eagerly, each exactly once per call


def test_compiled_disabled_function_is_never_captured():
    be = Recording()

    @disable
    def f(x):
        return x + 1

    cf = capture(f, be)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), x + 1)
    assert be.graphs == []


def test_allow_in_graph_puts_one_call_in_the_graph():
    def body(x):
        return torch.sigmoid(x) * x

    allowed = allow_in_graph(body)

    def f(x):
        return allowed(x) + 1

    be = Recording()
    x = torch.randn(5)
    torch.testing.assert_close(capture(f, be)(x), f(x))
    assert allowed in targets(be.graphs[0])


def test_is_compiling_is_true_while_captured():
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    be = Recording()
    x = torch.randn(3)
    torch.testing.assert_close(capture(f, be)(x), x + 1)
    assert not torch.compiler.is_compiling()


def _symbolic_dims(example_inputs) -> list[int]:
    t = next(v for v in example_inputs if isinstance(v, torch.Tensor))
    return [d for d, s in enumerate(t.shape) if isinstance(s, torch.SymInt)]


def test_mark_dynamic_makes_one_graph_for_all_sizes_from_the_first_call():
    def f(x):
        return (x * 2).sum(0)

    be = Recording()
    cf = capture(f, be, dynamic=False)
    for n in (5, 9, 13):
        x = torch.randn(n, 4)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(cf(x), f(x))
    assert len(be.graphs) == 1
    fake = be.graphs[0].graph.find_nodes(op="placeholder")[0].meta["example_value"]
    assert isinstance(fake.shape[0], torch.SymInt) and not isinstance(fake.shape[1], torch.SymInt)


def test_our_mark_dynamic_and_mark_static():
    def f(x):
        return x.cos() + 1

    be = Recording()
    cf = capture(f, be)  # automatic dynamic
    for n in (3, 6, 8):
        x = torch.randn(n, 2)
        mark_static(x, 0)
        torch.testing.assert_close(cf(x), f(x))
    assert len(be.graphs) == 3  # static: one graph per size, never symbolic
    be2 = Recording()
    cf2 = capture(f, be2)
    for n in (3, 6, 8):
        x = torch.randn(n, 2)
        mark_dynamic(x, 0)
        torch.testing.assert_close(cf2(x), f(x))
    assert len(be2.graphs) == 1


def _helper_marked_by_torch_compiler(x):
    print("not traced: the call is one graph node")  # a break, if capture inlined it
    return torch.sigmoid(x) * x


def test_torch_compiler_allow_in_graph_is_inlined_with_eagers_results(capsys):
    """torch.compiler.allow_in_graph records the function in TorchDynamo's registry only, which
    capture does not read: the function is inlined (its print breaks the graph and runs, as in
    eager), with eager's results and output; our allow_in_graph makes it one call instead."""
    allowed = torch.compiler.allow_in_graph(_helper_marked_by_torch_compiler)

    def f(x):
        return allowed(x.cos()) + 1

    be = Recording()
    cf = capture(f, be)
    x = torch.randn(5)
    want = f(x)
    eager_out = capsys.readouterr().out
    torch.testing.assert_close(cf(x), want)
    assert capsys.readouterr().out == eager_out
    assert any("print()" in b.reason for b in cf.graph_breaks)
    assert all(_helper_marked_by_torch_compiler not in targets(g) for g in be.graphs)


def test_torch_functions_in_torch_compilers_registry_keep_capture_rules():
    """TorchDynamo's registry also lists torch's own callables once it is built: capture keeps
    placing those by its own rules (a no_grad block's mode changes, a tensor's gradient path)."""
    torch.compiler.allow_in_graph(_helper_marked_by_torch_compiler)  # builds the registry

    def f(x):
        with torch.no_grad():
            y = x * 2
        return y + x

    be = Recording()
    x = torch.randn(4, requires_grad=True)
    out = capture(f, be)(x)
    torch.testing.assert_close(out, f(x))
    assert out.requires_grad and len(be.graphs) == 1
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, torch.ones(4))  # y = x * 2 was made without grad, as eager


def test_torchs_maybe_mark_dynamic_and_mark_static():
    def f(x):
        return x.cos() * 2

    be = Recording()
    cf = capture(f, be, dynamic=False)
    for n in (3, 6, 8):
        x = torch.randn(n, 2)
        torch._dynamo.maybe_mark_dynamic(x, 0)
        torch.testing.assert_close(cf(x), f(x))
    assert len(be.graphs) == 1 and _placeholder_symbolic_dims(be.graphs[0]) == [0]
    be2 = Recording()
    cf2 = capture(f, be2)  # automatic dynamic would make dim 0 symbolic at the recompile
    for n in (3, 6, 8):
        x = torch.randn(n, 2)
        torch._dynamo.mark_static(x, 0)
        torch.testing.assert_close(cf2(x), f(x))
    assert len(be2.graphs) == 3 and all(_placeholder_symbolic_dims(g) == [] for g in be2.graphs)


def _placeholder_symbolic_dims(gm) -> list[int]:
    fake = gm.graph.find_nodes(op="placeholder")[0].meta["example_value"]
    return [d for d, s in enumerate(fake.shape) if isinstance(s, torch.SymInt)]
