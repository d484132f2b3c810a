"""Training path: joint graph + min-cut partition + autograd.Function give eager's gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _aot_test_modules import LinearBatchNorm
from torchkiln_aot_partition import (
    aot_compile,
    check_functional,
    default_partition,
    joint_graph,
    lift_parameters,
    min_cut_partition,
)
from torchkiln_aot_partition.trace import resolve_decompositions


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


class Attention(torch.nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        b, t, d = 2, 5, 16
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.proj(y)


def _clone_module(m):
    import copy

    return copy.deepcopy(m)


@pytest.mark.parametrize("make, shape", [(MLP, (6, 8)), (Attention, (2, 5, 16))])
def test_module_gradients_match_eager(make, shape, compiler, capture):
    mod = make()
    ref = _clone_module(mod)
    x = torch.randn(*shape, requires_grad=True)
    compiled = aot_compile(capture(mod), [x], fw_compiler=compiler)
    assert len(compiler.graphs) == 1  # backward compiled lazily
    x1 = torch.randn(*shape, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    out = compiled(x1)[0]
    want = ref(x2)
    torch.testing.assert_close(out, want)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    assert len(compiler.graphs) == 2
    torch.testing.assert_close(x1.grad, x2.grad)
    for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def _pointwise_block(x, w):
    h = x @ w
    y = torch.sigmoid(h) * torch.tanh(h) + (h * 0.5).sin() * h.cos()
    return (torch.exp(-y * y) * h,)


def test_min_cut_recomputes_and_saves_fewer_bytes(capture):
    x = torch.randn(16, 32, requires_grad=True)
    w = torch.randn(32, 64, requires_grad=True)
    lifted = lift_parameters(capture(_pointwise_block))
    joint = joint_graph(lifted.gm, [x, w], resolve_decompositions(None))
    kw = {"num_fwd_outputs": joint.num_fwd_outputs, "num_primals": joint.num_primals}
    fw, bw = min_cut_partition(joint.gm, **kw)
    fw0, bw0 = default_partition(joint.gm, **kw)
    stats, stats0 = fw.meta["partition"], fw0.meta["partition"]
    for g in (fw, bw, fw0, bw0):
        check_functional(g)
    assert stats.saved_bytes < stats0.saved_bytes
    assert stats.recomputed, "pointwise ops should be recomputed in the backward"
    # The matmul is banned from recomputation: it is never in the backward graph.
    mm_in_bw = [
        n
        for n in bw.graph.nodes
        if n.op == "call_function"
        and "mm" in str(n.target)
        and n.name in {m.name for m in fw.graph.nodes}
    ]
    assert not mm_in_bw
    # Both partitions compute the same values.
    for f, b in ((fw, bw), (fw0, bw0)):
        x1, w1 = torch.randn(16, 32), torch.randn(32, 64)
        tangent = torch.randn(16, 64)
        outs = f(x1, w1)
        grads = b(*outs[1:], tangent)
        xr, wr = x1.clone().requires_grad_(), w1.clone().requires_grad_()
        (yr,) = _pointwise_block(xr, wr)
        torch.testing.assert_close(outs[0], yr)
        gx, gw = torch.autograd.grad(yr, [xr, wr], tangent)
        torch.testing.assert_close(grads[0], gx)
        torch.testing.assert_close(grads[1], gw)


def _two_outputs(x, y):
    return (x.sin() * y, y.exp(), (x * 2).detach())


def test_outputs_without_grad_and_unused_in_backward(compiler, capture):
    x = torch.randn(4, 5, requires_grad=True)
    y = torch.randn(4, 5)
    compiled = aot_compile(capture(_two_outputs), [x, y], fw_compiler=compiler)
    x1 = torch.randn(4, 5, requires_grad=True)
    y1 = torch.randn(4, 5)
    x2 = x1.detach().clone().requires_grad_(True)
    outs = compiled(x1, y1)
    want = _two_outputs(x2, y1)
    for got, ref in zip(outs, want):
        torch.testing.assert_close(got, ref)
        assert got.requires_grad == ref.requires_grad
    # Only the first output takes part in the backward; the others get no gradient.
    g = torch.randn(4, 5)
    outs[0].backward(g)
    want[0].backward(g)
    torch.testing.assert_close(x1.grad, x2.grad)


def test_multiple_outputs_some_unused_in_backward(compiler, capture):
    def fn(x, w):
        h = x @ w
        return (h.relu(), h.sum(0), torch.tanh(w))

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 6, requires_grad=True)
    compiled = aot_compile(capture(fn), [x, w], fw_compiler=compiler)
    x1, w1 = torch.randn(3, 4, requires_grad=True), torch.randn(4, 6, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_(True) for t in (x1, w1))
    outs, want = compiled(x1, w1), fn(x2, w2)
    for got, ref in zip(outs, want):
        torch.testing.assert_close(got, ref)
    # Backward through the first output only: the tangents of the other two are zeros.
    outs[0].sum().backward()
    want[0].sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(w1.grad, w2.grad)


def test_batch_norm_training_grads_and_running_stats(compiler, capture):
    net = LinearBatchNorm()
    ref = _clone_module(net)
    x = torch.randn(8, 4)
    compiled = aot_compile(capture(net), [x], fw_compiler=compiler)
    x1 = torch.randn(8, 4)
    out, want = compiled(x1)[0], ref(x1)
    torch.testing.assert_close(out, want)
    out.sum().backward()
    want.sum().backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    torch.testing.assert_close(net.bn.running_mean, ref.bn.running_mean)
    torch.testing.assert_close(net.bn.running_var, ref.bn.running_var)


def test_input_mutation_in_training(compiler, capture):
    def fn(x, w, buf):
        buf.mul_(0.5)
        return ((x * w).sum(1) + buf,)

    x, w, buf = torch.randn(3, 4), torch.randn(3, 4, requires_grad=True), torch.randn(3)
    compiled = aot_compile(capture(fn), [x, w, buf.clone()], fw_compiler=compiler)
    w1 = torch.randn(3, 4, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_(True)
    b1 = torch.randn(3)
    b2 = b1.clone()
    out, want = compiled(x, w1, b1)[0], fn(x, w2, b2)[0]
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(b1, b2)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad)


def test_no_grad_mode_takes_inference_path(compiler, capture):
    mod = MLP()
    x = torch.randn(6, 8)
    with torch.no_grad():
        compiled = aot_compile(capture(mod), [x], fw_compiler=compiler)
        out = compiled(x)[0]
    torch.testing.assert_close(out, mod(x).detach())
    assert not out.requires_grad
    assert len(compiler.graphs) == 1
    assert "partition" not in compiler.graphs[0].meta


def test_non_tensor_outputs_pass_through(compiler, capture):
    def fn(x, y):
        return (x.sin() * y, None, 3, y.cos())

    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            compiled = aot_compile(capture(fn), [x, y], fw_compiler=compiler)
            x1 = x.detach().clone().requires_grad_(True)
            x2 = x.detach().clone().requires_grad_(True)
            got, want = compiled(x1, y), fn(x2, y)
        assert got[1] is None and got[2] == 3 and len(got) == 4
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[3], want[3])
        if grad:
            got[0].sum().backward()
            want[0].sum().backward()
            torch.testing.assert_close(x1.grad, x2.grad)


def _aliasing(x, y):
    y.add_(1)
    return (x, x.t(), y[1], x.sin())


@pytest.mark.parametrize("grad", [True, False])
def test_outputs_aliasing_inputs_keep_eager_aliasing(grad, compiler, capture):
    x, y = torch.randn(4, 5, requires_grad=True), torch.randn(3, 5)
    with torch.set_grad_enabled(grad):
        compiled = aot_compile(capture(_aliasing), [x, y.clone()], fw_compiler=compiler)
        x1, y1 = torch.randn(4, 5, requires_grad=True), torch.randn(3, 5)
        x2, y2 = x1.detach().clone().requires_grad_(True), y1.clone()
        got, want = compiled(x1, y1), _aliasing(x2, y2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(y1, y2)
    assert got[0] is x1
    assert got[1]._base is x1 and got[2]._base is y1
    with torch.no_grad():
        got[2].zero_()  # writes through to the input, as in eager
    assert torch.all(y1[1] == 0)
    if grad:
        (got[0].sum() + 2 * got[1].sum() + got[3].sum()).backward()
        (want[0].sum() + 2 * want[1].sum() + want[3].sum()).backward()
        torch.testing.assert_close(x1.grad, x2.grad)


def test_threads_running_their_first_backward_together_compile_it_once(compiler, capture):
    import threading
    import time

    def slow_compiler(gm, inputs):  # a backward compile long enough for every thread to arrive
        if compiler.graphs:
            time.sleep(0.3)
        return compiler(gm, inputs)

    mod = MLP()
    ref = _clone_module(mod)
    compiled = aot_compile(
        capture(mod), [torch.randn(6, 8, requires_grad=True)], fw_compiler=slow_compiler
    )
    xs = [torch.randn(6, 8, requires_grad=True) for _ in range(4)]
    outs = [compiled(x)[0] for x in xs]
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def backward(i: int) -> None:
        barrier.wait()
        try:
            outs[i].sum().backward()
        except BaseException as e:  # noqa: BLE001 - checked below
            errors.append(e)

    threads = [threading.Thread(target=backward, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(compiler.graphs) == 2  # forward + one backward
    for x in xs:
        x2 = x.detach().clone().requires_grad_(True)
        ref(x2).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)


def test_double_backward_is_a_clear_error_not_a_wrong_gradient():
    import pytest
    from torchkiln_aot_partition import DoubleBackwardUnsupported, aot_compile

    def f(x):
        return (x.sin() * x).sum()

    x = torch.randn(6, requires_grad=True)
    gm = torch.fx.symbolic_trace(f)
    compiled = aot_compile(gm, [x], fw_compiler=lambda g, inputs: g.forward)
    (out,) = compiled(x)
    # first-order gradients still work with create_graph=False
    (g,) = torch.autograd.grad(out, x, retain_graph=True)
    torch.testing.assert_close(g, x.cos() * x + x.sin())
    with pytest.raises(DoubleBackwardUnsupported, match="create_graph=True"):
        torch.autograd.grad(out, x, create_graph=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("decompositions", ["core-aten", "none"])
def test_sdpa_gradients_match_eager_with_the_core_aten_table(
    causal, decompositions, compiler, capture
):
    """The core-ATen table decomposes the fused CPU attention forward, whose backward kernel reads
    a logsumexp in its own layout: the joint trace keeps the forward whole (gradients were off by
    ~50 with the forward decomposed)."""

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    table = None if decompositions == "core-aten" else {}
    compiled = aot_compile(capture(fn), [q, k, v], fw_compiler=compiler, decompositions=table)
    q1, k1, v1 = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (q1, k1, v1))
    out, want = compiled(q1, k1, v1)[0], fn(q2, k2, v2)
    torch.testing.assert_close(out, want)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    for got, ref in ((q1, q2), (k1, k2), (v1, v2)):
        torch.testing.assert_close(got.grad, ref.grad)


def test_gradients_of_inputs_out_of_order_and_a_functorch_transform_refused(compiler, capture):
    # only the first and third inputs need a gradient: the backward's gradients are scattered
    # into their positions (the in-order shortcut does not apply), the others stay None
    def fn(a, b, c):
        return ((a * b).sin() + c.cos() * b,)

    a, b, c = torch.randn(5, requires_grad=True), torch.randn(5), torch.randn(5, requires_grad=True)
    compiled = aot_compile(capture(fn), [a, b, c], fw_compiler=compiler)
    a1, b1, c1 = (
        torch.randn(5, requires_grad=True),
        torch.randn(5),
        torch.randn(5, requires_grad=True),
    )
    a2, c2 = (t.detach().clone().requires_grad_(True) for t in (a1, c1))
    (got,), (want,) = compiled(a1, b1, c1), fn(a2, b1, c2)
    torch.testing.assert_close(got, want)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad)
    torch.testing.assert_close(c1.grad, c2.grad)
    assert b1.grad is None
    # under a functorch transform the Function is refused (it defines no setup_context), as
    # autograd.Function.apply refuses it: no gradient computed around the transform
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda t: compiled(t, b1, c1)[0].sum())(a1.detach())


def _zero_size_maximum(x):
    return (torch.cat([torch.maximum(x, x.reshape(-1)), x], 0),)


@pytest.mark.parametrize("partition", [min_cut_partition, default_partition])
def test_a_gradient_that_reads_no_tangent_is_computed(capture, partition):
    """Fuzz seed 180 (training): over zero elements the backward of ``maximum`` is constants
    and masks of the input, and reads no tangent. No node then drained into the min-cut's sink,
    nothing was saved, and the backward's split failed for want of the input (the graph ran
    eagerly). A gradient is the backward's output whatever it reads."""
    x = torch.randn(0, requires_grad=True)
    lifted = lift_parameters(capture(_zero_size_maximum))
    joint = joint_graph(lifted.gm, [x], resolve_decompositions(None))
    kw = {"num_fwd_outputs": joint.num_fwd_outputs, "num_primals": joint.num_primals}
    fw, bw = partition(joint.gm, **kw)
    x1 = torch.randn(0)
    outs = fw(x1)
    (grad,) = bw(*outs[1:], torch.randn(0))
    xr = x1.clone().requires_grad_()
    (yr,) = _zero_size_maximum(xr)
    torch.testing.assert_close(outs[0], yr)
    (want,) = torch.autograd.grad(yr, [xr], torch.randn(0))
    torch.testing.assert_close(grad, want)
