"""Saved-for-backward bytes: the min-cut saves at most what eager saves (float32 and bfloat16
autocast), the figures are right on hand-checked graphs, and gradients still equal eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torchkiln_aot_partition import aot_compile, partition_saved_bytes, saved_tensor_bytes


class Block(torch.nn.Module):
    """A pre-norm transformer block (softmax attention written out, GELU MLP), no dropout.
    (SDPA through torch's core-ATen math decomposition gets wrong gradients here: see the
    repository's tests/test_training_memory.py for SDPA through loop-ir's decompositions.)"""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc1, self.fc2 = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = 2, 16, 64  # fx's symbolic trace cannot unpack x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _autocast(dtype):
    return (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if dtype == "bf16"
        else torch.autocast("cpu", enabled=False)
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_block_saves_at_most_eager_and_gradients_match(dtype, compiler, capture):
    mod = Block()
    ref = copy.deepcopy(mod)
    x = torch.randn(2, 16, 64)
    with _autocast(dtype):
        compiled = aot_compile(capture(mod), [x], fw_compiler=compiler)
    held = [*mod.parameters(), *ref.parameters()]
    x1 = torch.randn(2, 16, 64)  # fresh input
    with _autocast(dtype):
        (out,), ours = saved_tensor_bytes(compiled, x1, held=[*held, x1])
        want, eager = saved_tensor_bytes(ref, x1, held=[*held, x1])
    assert ours.activations <= eager.activations, (ours, eager)
    stats = partition_saved_bytes(compiled)
    assert stats is not None and stats.activation_bytes == ours.activations
    # never a tensor and a view or cast of it both
    fw_nodes = {n.name: n for n in compiler.graphs[0].graph.nodes}
    saved = {fw_nodes[name] for name in stats.saved}
    for node in saved:
        derived = isinstance(node.target, torch._ops.OpOverload) and (
            node.target is torch.ops.aten._to_copy.default or node.target.is_view
        )
        assert not (derived and node.args[0] in saved), node.format_node()
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == "bf16" else {}
    torch.testing.assert_close(out, want, **tol)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name, **tol)


def test_hand_checked_figures(compiler, capture):
    """sin(x @ w): eager saves x, w (the caller's) and h = x @ w (16 x 64 floats); so does the
    cut, since sin's backward needs h and the matmul is not recomputed."""

    def f(x, w):
        return ((x @ w).sin(),)

    x, w = torch.randn(16, 32), torch.randn(32, 64, requires_grad=True)  # x needs no grad
    compiled = aot_compile(capture(f), [x, w], fw_compiler=compiler)
    _, ours = saved_tensor_bytes(compiled, x, w, held=[x, w])
    _, eager = saved_tensor_bytes(f, x, w, held=[x, w])
    assert ours.activations == eager.activations == 16 * 64 * 4
    assert partition_saved_bytes(compiled).activation_bytes == 16 * 64 * 4


def test_autocast_weight_cast_is_saved_not_recomputed(compiler, capture):
    """Under bfloat16 autocast eager keeps a bfloat16 copy of the weight for the backward; so
    does the cut (no cast again in the backward: a kernel launch per weight each step), and it
    saves no more than eager."""
    lin = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
    ref = copy.deepcopy(lin)
    x = torch.randn(4, 256, requires_grad=True)  # its gradient needs the weight
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compiled = aot_compile(capture(lin), [x], fw_compiler=compiler)
        held = [*lin.parameters(), *ref.parameters(), x]
        (out,), ours = saved_tensor_bytes(compiled, x, held=held)
        want, eager = saved_tensor_bytes(ref, x, held=held)
    assert eager.activations >= 256 * 256 * 2  # eager's bfloat16 weight copy
    assert 256 * 256 * 2 <= ours.activations <= eager.activations
    saved = compiled.plan.partition.saved
    assert any(name.startswith("_to_copy") for name in saved), saved
    out.float().sum().backward()
    want.float().sum().backward()
    for p, q in zip(lin.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=3e-2, rtol=3e-2)


def _nonzero_randn(*size, dtype):
    """randn with its zeros replaced: torch 2.11's CPU randn in bfloat16 draws exact zeros (about
    0.5% of elements: its Box-Muller takes log(1 - u) in bfloat16, where 1 - u rounds to 1 for a
    small u), and a zero input reads as a dropped element in the test below."""
    x = torch.randn(*size, dtype=dtype)
    return torch.where(x == 0, torch.ones((), dtype=dtype), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_mask_saved_as_bool(dtype, compiler, capture):
    """Dropout's draw is saved as a bool, one byte an element (as eager's native_dropout saves
    its mask on CUDA; on the CPU eager keeps the scaled float noise), and the gradient is the
    incoming one through the mask this call drew."""

    def f(x):
        return (F.dropout(x * 2, 0.25, training=True),)

    x = torch.randn(64, 32, dtype=dtype, requires_grad=True)
    compiled = aot_compile(capture(f), [x], fw_compiler=compiler)
    x1 = _nonzero_randn(64, 32, dtype=dtype).requires_grad_(True)  # fresh input
    (out,), ours = saved_tensor_bytes(compiled, x1, held=[x1])
    _, eager = saved_tensor_bytes(f, x1, held=[x1])
    assert ours.activations == 64 * 32  # one bool per element
    assert eager.activations == 64 * 32 * x.element_size()  # CPU eager: the float noise
    kept = out != 0  # x1 has no zeros: a zero is a dropped element
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(out, torch.where(kept, x1.detach() * 2 / 0.75, 0).to(dtype))
    g = torch.randn_like(out)
    out.backward(g)
    torch.testing.assert_close(x1.grad, torch.where(kept, g * 2 / 0.75, 0).to(dtype))


def test_saved_activation_bytes_for_given_inputs_evaluates_symbolic_sizes(compiler, capture):
    """tanh(x @ w) with a symbolic batch n: the cut saves tanh's output (n x 3 floats; tanh's
    backward needs it, the matmul is not recomputed). The figure is evaluated at the inputs'
    real sizes, and equals what autograd's saved-tensor hooks see on that call."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )
    from torchkiln_aot_partition import saved_activation_bytes

    def _mlp(x, w):
        return (torch.tanh(x @ w).sum(1),)

    x, w = torch.randn(5, 4), torch.randn(4, 3, requires_grad=True)
    gm = capture(_mlp)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x_node, w_node = (n for n in gm.graph.nodes if n.op == "placeholder")
    x_node.meta["example_value"] = mode.from_tensor(  # capture's form of a dynamic batch
        x,
        symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC]
        ),
    )
    w_node.meta["example_value"] = mode.from_tensor(w)
    compiled = aot_compile(gm, [x, w], fw_compiler=compiler)
    stats = partition_saved_bytes(compiled)
    assert stats.symbolic_activation_bytes  # a formula of the batch size
    assert stats.activation_bytes == 5 * 3 * 4  # at the compiling call's sizes
    for n in (2, 9):
        x1 = torch.randn(n, 4)
        assert saved_activation_bytes(compiled, [x1, w]) == n * 3 * 4
        (out,), measured = saved_tensor_bytes(compiled, x1, w, held=[x1, w])
        assert measured.activations == n * 3 * 4
        w1 = w.detach().clone().requires_grad_(True)
        want = _mlp(x1, w1)[0]
        torch.testing.assert_close(out, want)
        g = torch.randn(n)
        out.backward(g)
        want.backward(g)
        torch.testing.assert_close(w.grad, w1.grad)
        w.grad = None


def test_a_runtime_rebuilt_from_its_metadata_keeps_the_partition_figures(compiler, capture):
    from torchkiln_aot_partition import rebuild_runtime, runtime_metadata, saved_activation_bytes

    def f(x, w):
        return ((x @ w).sin(),)

    x, w = torch.randn(16, 32), torch.randn(32, 64, requires_grad=True)
    gm = capture(f)
    compiled = aot_compile(gm, [x, w], fw_compiler=compiler)
    out = compiled(x, w)[0]
    out.sum().backward()  # compiles the backward graph
    rebuilt = rebuild_runtime(gm, runtime_metadata(compiled), *compiler.graphs[:2])
    assert partition_saved_bytes(rebuilt) == partition_saved_bytes(compiled)
    assert saved_activation_bytes(rebuilt, [x, w]) == 16 * 64 * 4
    w1 = w.detach().clone().requires_grad_(True)
    rebuilt(x, w1)[0].sum().backward()
    torch.testing.assert_close(w1.grad, w.grad)


class _ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        # batch norm in its functional form: the module's input check is control flow fx's
        # symbolic trace cannot follow
        h = F.batch_norm(self.c1(x), None, None, self.bn.weight, self.bn.bias, training=True)
        return self.c2(torch.relu(h)).mean((2, 3))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_conv_block_saves_what_conv_and_reductions_make(dtype, compiler, capture):
    """The policy: conv -> batch norm -> ReLU -> conv saves the first conv's output, the
    norm's statistics and the ReLU's output (the second conv's input: its weight gradient reads
    it from memory, so recomputing it would only write it again, recompute_policy.py); no other
    recomputable value is saved together with all it is computed from (but autocast's weight
    copies, kept as eager keeps them); the gradients equal eager's."""
    from torchkiln_aot_partition import is_recomputable

    mod = _ConvBlock().train()
    ref = copy.deepcopy(mod)
    x = torch.randn(2, 3, 8, 8)
    with _autocast(dtype):
        compiled = aot_compile(capture(mod), [x], fw_compiler=compiler)
    fw = compiler.graphs[0]
    by_name = {n.name: n for n in fw.graph.nodes}
    stats = partition_saved_bytes(compiled)
    saved = {by_name[name] for name in stats.saved}
    primals = {n for n in fw.graph.nodes if n.op == "placeholder"}
    convs = [n for n in fw.graph.nodes if n.target is torch.ops.aten.convolution.default]
    assert convs[0] in saved  # the first conv's output
    assert [n for n in saved if n.target is torch.ops.aten.relu.default] == [convs[1].args[0]]
    for node in saved - primals:
        if node.target is torch.ops.aten._to_copy.default and node.args[0] in primals:
            continue  # autocast's weight copy: saved, as eager's autocast cache keeps it
        if is_recomputable(node):
            inputs = [a for a in node.all_input_nodes]
            assert not all(a in saved or a in primals for a in inputs), node.format_node()
    x1 = torch.randn(2, 3, 8, 8)  # fresh input
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == "bf16" else {}
    with _autocast(dtype):
        (out,) = compiled(x1)
        want = ref(x1)
    torch.testing.assert_close(out, want, **tol)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name, **tol)
