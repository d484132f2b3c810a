"""Backward graphs specialised on None tangents: outputs the loss does not use cost nothing, and
the gradients (None ones included) are eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import fx
from torchkiln_aot_partition import aot_compile


class TwoHeads(torch.nn.Module):
    """A trunk feeding a main output and a pooler-like head (BERT's pooler, GPT-2's presents)."""

    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4)
        self.pooler = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = self.norm(F.gelu(self.trunk(x)))
        main = self.head(h)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        cache = h.transpose(0, 1) * 2.0  # a view-and-scale of the trunk, as cached keys are
        return main, pooled, cache


def _losses():
    # which outputs the loss uses: one, another, several, all
    return {
        "main": lambda m, p, c: (m * m).sum(),
        "pooled": lambda m, p, c: p.sum(),
        "cache": lambda m, p, c: (c * c).mean(),
        "main+pooled": lambda m, p, c: m.sum() + (p * 3).sum(),
        "all": lambda m, p, c: m.sum() + p.sum() + c.sum(),
    }


def _grads(mod, x):
    return [x.grad] + [p.grad for p in mod.parameters()]


def _assert_same_grads(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, f"grad {i}: eager's is None, compiled gave one"
        else:
            assert g is not None, f"grad {i}: compiled gave None"
            torch.testing.assert_close(g, w, msg=f"grad {i}")


def _step(compiled, mod, ref, loss):
    x = torch.randn(3, 5, 8, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    for p in [*mod.parameters(), *ref.parameters()]:
        p.grad = None
    loss(*compiled(x)).backward()
    loss(*ref(xr)).backward()
    _assert_same_grads(_grads(mod, x), _grads(ref, xr))


@pytest.mark.parametrize("which", list(_losses()))
def test_gradients_equal_eager_whichever_outputs_the_loss_uses(which, compiler, capture):
    mod = TwoHeads()
    ref = copy.deepcopy(mod)
    compiled = aot_compile(
        capture(mod), [torch.randn(3, 5, 8, requires_grad=True)], fw_compiler=compiler
    )
    _step(compiled, mod, ref, _losses()[which])
    if which == "main":
        assert mod.pooler.weight.grad is None  # as eager leaves it: nothing flowed there


def _ops(gm: fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_one_output_backward_has_fewer_ops_and_no_zeros(compiler, capture):
    mod = TwoHeads()
    ref = copy.deepcopy(mod)
    compiled = aot_compile(
        capture(mod), [torch.randn(3, 5, 8, requires_grad=True)], fw_compiler=compiler
    )
    _step(compiled, mod, ref, _losses()["all"])
    _step(compiled, mod, ref, _losses()["main"])
    assert len(compiler.graphs) == 3  # forward, full backward, backward for "main" only
    full, main_only = compiler.graphs[1], compiler.graphs[2]
    assert main_only.meta["absent_tangents"] == (1, 2)
    assert len(_ops(main_only)) < len(_ops(full))
    zeros = {torch.ops.aten.full.default, torch.ops.aten.zeros.default}
    assert not zeros.intersection(_ops(main_only))
    # the pooler's matmuls are gone: only the trunk's and the head's remain
    mms = [
        t for t in _ops(main_only) if t in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    ]
    assert len(mms) < len(
        [t for t in _ops(full) if t in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)]
    )


def test_pattern_changes_between_calls_compile_one_variant_each(compiler, capture):
    mod = TwoHeads()
    ref = copy.deepcopy(mod)
    compiled = aot_compile(
        capture(mod), [torch.randn(3, 5, 8, requires_grad=True)], fw_compiler=compiler
    )
    order = ["main", "pooled", "main", "all", "cache", "pooled", "main+pooled", "all"]
    for which in order:
        _step(compiled, mod, ref, _losses()[which])
    # forward + one backward per distinct pattern, each compiled once
    assert len(compiler.graphs) == 1 + len(set(order))
    patterns = [g.meta.get("absent_tangents", ()) for g in compiler.graphs[1:]]
    assert len(set(patterns)) == len(patterns)


def test_gradient_accumulates_over_patterns(compiler, capture):
    """Two backwards into the same .grad (accumulation), with different None patterns."""
    mod = TwoHeads()
    ref = copy.deepcopy(mod)
    compiled = aot_compile(
        capture(mod), [torch.randn(3, 5, 8, requires_grad=True)], fw_compiler=compiler
    )
    x = torch.randn(3, 5, 8, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    for loss in (_losses()["pooled"], _losses()["cache"]):
        loss(*compiled(x)).backward()
        loss(*ref(xr)).backward()
    _assert_same_grads(_grads(mod, x), _grads(ref, xr))


def test_add_of_zero_term_with_broadcast_and_alpha(compiler, capture):
    """A zero term added to a smaller operand (broadcast) or with alpha is rewritten exactly."""

    def f(x, b):
        y = torch.add(x * 2, b, alpha=3.0)  # b broadcasts over x's rows
        z = torch.sub(b.expand(4, 6), x, alpha=0.5)
        return y.sin(), z

    x = torch.randn(4, 6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    compiled = aot_compile(capture(f), [x, b], fw_compiler=compiler)
    for pick in (0, 1):
        x1 = torch.randn(4, 6, requires_grad=True)
        b1 = torch.randn(6, requires_grad=True)
        x2, b2 = x1.detach().clone().requires_grad_(True), b1.detach().clone().requires_grad_(True)
        g = torch.randn(4, 6)
        compiled(x1, b1)[pick].backward(g)
        f(x2, b2)[pick].backward(g)
        _assert_same_grads([x1.grad, b1.grad], [x2.grad, b2.grad])


def _chunks(x, w):
    h = x @ w
    a, b = h.chunk(2, dim=1)  # chunk's backward concatenates the pieces' gradients
    return a.sin(), b


def _chunk_step(compiled, n):
    x = torch.randn(n, 4, requires_grad=True)
    w = torch.randn(4, 6, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_(True) for t in (x, w))
    compiled(x, w)[0].sum().backward()  # b unused
    _chunks(x2, w2)[0].sum().backward()
    _assert_same_grads([x.grad, w.grad], [x2.grad, w2.grad])


def test_a_zero_meeting_an_op_without_rule_becomes_a_zeros_tensor(compiler, capture):
    """cat of a gradient and a zero keeps the cat, with a zeros tensor for the unused piece."""
    x, w = torch.randn(5, 4, requires_grad=True), torch.randn(4, 6, requires_grad=True)
    compiled = aot_compile(capture(_chunks), [x, w], fw_compiler=compiler)
    _chunk_step(compiled, 5)
    assert compiler.graphs[-1].meta["absent_tangents"] == (1,)
    assert torch.ops.aten.full.default in _ops(compiler.graphs[-1])


def test_symbolic_sizes_fall_back_to_zeros_for_the_full_graph(compiler, capture):
    """A zeros tensor of symbolic size is not made in the graph: the full backward runs, given
    zeros, and the gradients are still eager's at every size."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    x, w = torch.randn(5, 4, requires_grad=True), torch.randn(4, 6, requires_grad=True)
    gm = capture(_chunks)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x_node, w_node = [n for n in gm.graph.nodes if n.op == "placeholder"]
    x_node.meta["example_value"] = mode.from_tensor(
        x,
        symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC]
        ),
    )  # x's rows symbolic, as capture does
    w_node.meta["example_value"] = mode.from_tensor(
        w,
        symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.STATIC, DimDynamic.STATIC]
        ),
    )
    compiled = aot_compile(gm, [x, w], fw_compiler=compiler)
    for n in (3, 8):
        _chunk_step(compiled, n)
    assert len(compiler.graphs) == 2 and "absent_tangents" not in compiler.graphs[1].meta


def test_a_rebuilt_runtime_passes_zeros_to_its_one_backward(compiler, capture):
    """A runtime rebuilt from a cache has only the full compiled backward: an unused output's
    gradient is a zeros tensor again, and the used ones' gradients are eager's."""
    from torchkiln_aot_partition import rebuild_runtime, runtime_metadata

    mod = TwoHeads()
    ref = copy.deepcopy(mod)
    gm = capture(mod)
    first = aot_compile(gm, [torch.randn(3, 5, 8, requires_grad=True)], fw_compiler=compiler)
    _step(first, mod, ref, _losses()["all"])
    rebuilt = rebuild_runtime(
        gm, runtime_metadata(first), compiler.graphs[0].forward, compiler.graphs[1].forward
    )
    x = torch.randn(3, 5, 8, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    mod.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    _losses()["main+pooled"](*rebuilt(x)).backward()
    _losses()["main+pooled"](*ref(xr)).backward()
    _assert_same_grads(_grads(mod, x), _grads(ref, xr))
    assert len(compiler.graphs) == 2


class ClampedHead(torch.nn.Module):
    """A head whose last op is a clamp or a relu: its backward is ``where(mask, grad, 0)`` with
    the zero a ``scalar_tensor(0.0)``, which left the head's weights a zeros gradient (eager's
    is None) when the loss did not use the head (training fuzz seed 617, ``x.clamp_(max=1)``
    of an input the loss does not read); ``maximum``'s backward ends in ``copy(where, where)``,
    a copy of a zero (seed 4215)."""

    def __init__(self, act):
        super().__init__()
        self.trunk = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 16)
        self.act = act

    def forward(self, x):
        h = self.trunk(x)
        return h.sum(-1), self.act(self.head(h))


@pytest.mark.parametrize(
    "act",
    [
        torch.relu,
        lambda t: t.clamp(max=0.5),
        lambda t: t.clamp(-0.5, 0.5),
        lambda t: torch.maximum(t / 2.0, t),  # its backward copies a where into a where
    ],
)
def test_an_unused_head_ending_in_a_mask_gets_no_gradient(act, compiler, capture):
    mod = ClampedHead(act)
    ref = copy.deepcopy(mod)
    compiled = aot_compile(
        capture(mod), [torch.randn(3, 8, requires_grad=True)], fw_compiler=compiler
    )
    x = torch.randn(3, 8, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    compiled(x)[0].sum().backward()
    ref(xr)[0].sum().backward()
    _assert_same_grads(_grads(mod, x), _grads(ref, xr))
    assert mod.head.weight.grad is None and mod.head.bias.grad is None
