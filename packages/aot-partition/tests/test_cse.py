"""cse.py: nodes computing the same op on the same arguments are merged in the functional graph
(autocast's casts of one input, one per linear layer), random draws and data checks are not, and
the results and gradients still equal eager's."""

from __future__ import annotations

import copy

import torch
from torchkiln_aot_partition import aot_compile, functional_graph, joint_graph, lift_parameters
from torchkiln_aot_partition.trace import resolve_decompositions


class ThreeProjections(torch.nn.Module):
    """Attention's query, key and value projections of one layer-norm output."""

    def __init__(self, dim=16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.q, self.k, self.v = (torch.nn.Linear(dim, dim) for _ in range(3))

    def forward(self, x):
        h = self.norm(x)
        return (self.q(h) * self.k(h) + self.v(h),)


def _casts_of_activations(gm) -> int:
    """Casts to bfloat16 of a batch-shaped value (4 x 16; the weights are 16 x 16 and 16)."""
    return sum(
        1
        for n in gm.graph.nodes
        if n.target is torch.ops.aten._to_copy.default
        and n.kwargs.get("dtype") == torch.bfloat16
        and tuple(n.args[0].meta["val"].shape) == (4, 16)
    )


def test_autocast_casts_one_input_once(capture):
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fg, _ = functional_graph(capture(ThreeProjections()), [x])
    # eager casts the layer-norm output three times, once per linear layer
    assert _casts_of_activations(fg.gm) == 1, fg.gm.code


def test_the_joint_graph_casts_once_and_gradients_match(compiler, capture):
    mod = ThreeProjections()
    ref = copy.deepcopy(mod)
    x = torch.randn(4, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lifted = lift_parameters(capture(mod))
        joint = joint_graph(lifted.gm, [*lifted.params, x], resolve_decompositions(None))
        assert _casts_of_activations(joint.gm) == 1, joint.gm.code
        compiled = aot_compile(capture(mod), [x], fw_compiler=compiler)
    x1 = torch.randn(4, 16, requires_grad=True)  # fresh input
    x2 = x1.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (out,) = compiled(x1)
        (want,) = ref(x2)
    torch.testing.assert_close(out, want, atol=3e-2, rtol=3e-2)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, atol=5e-2, rtol=5e-2)
    for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=5e-2, rtol=5e-2, msg=name)


def _two_draws(x):
    return (torch.rand_like(x) + torch.rand_like(x), x.sin() + x.sin())


def test_random_draws_stay_apart(capture):
    fg, _ = functional_graph(capture(_two_draws), [torch.randn(8)])
    targets = [n.target for n in fg.gm.graph.nodes if n.op == "call_function"]
    draws = [t for t in targets if torch.Tag.nondeterministic_seeded in getattr(t, "tags", ())]
    assert len(draws) == 2, fg.gm.code  # two draws are two values
    assert targets.count(torch.ops.aten.sin.default) == 1, fg.gm.code


def _signed_zero_bounds(x):
    # (the repeated clamp is no output: two outputs are never merged, test_two_outputs_...)
    return (x.clamp(max=-0.0), x.clamp(max=0.0) * x.clamp(max=0.0))


def test_constants_equal_as_floats_but_not_the_same_stay_apart(capture):
    """-0.0 == 0.0 in Python, yet clamp(max=-0.0) turns 0.0 into -0.0 and clamp(max=0.0) does
    not: the two calls stay, the repeated one goes."""
    x = torch.tensor([0.0, -0.0, 1.0, -1.0])
    fg, _ = functional_graph(capture(_signed_zero_bounds), [x])
    clamps = [n for n in fg.gm.graph.nodes if n.op == "call_function" and "clamp" in str(n.target)]
    assert len(clamps) == 2, fg.gm.code
    got = fg.gm(x)
    for g, w in zip(got, _signed_zero_bounds(x)):
        assert torch.equal(g, w) and torch.equal(g.signbit(), w.signbit())


def _twice(x):
    t = x.sin()
    return (x @ x.mT, x @ x.mT, t.view(-1), t[0])


def test_two_outputs_eager_returns_apart_stay_apart(capture):
    """``x @ x.mT`` returned twice is two tensors in eager: merged, the two outputs would be
    one memory (a write to one changing the other). Views of one tensor stay views of it."""
    x = torch.randn(3, 4)
    fg, _ = functional_graph(capture(_twice), [x])
    targets = [n.target for n in fg.gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.aten.mm.default) == 2, fg.gm.code
    assert targets.count(torch.ops.aten.sin.default) == 1, fg.gm.code
