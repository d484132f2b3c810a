"""Training through torchkiln.compile with the autograd features people use around a step, each
against eager on fresh inputs (CPU, small models; bfloat16 autocast on the CPU):

- ``torch.autocast`` around the compiled call and as a context manager inside it, nested;
- ``torch.enable_grad`` inside a ``no_grad`` region, and inside a function called under no_grad;
- ``retain_graph``: a second backward through the same compiled graph, and eager's error without;
- double backward: a clear ``DoubleBackwardUnsupported`` (first-order gradients unaffected);
- gradient accumulation over several calls, on a conv net, float32 and bfloat16 autocast;
- dropout with a fixed seed: the same masks call after call, the gradient through that mask.

(``torch.utils.checkpoint`` regions, autocast and no_grad inside one graph: test_training_ops.)"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import torchkiln
from torch import nn
from torchkiln_aot_partition import DoubleBackwardUnsupported

pytestmark = pytest.mark.usefixtures("private_cache_dir")

BF16_TOL = dict(atol=5e-2, rtol=5e-2)


def _autocast(dtype: str):
    enabled = dtype == "bf16"
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)


def _twin(*tensors):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


@pytest.mark.parametrize("outer", ["fp32", "bf16"])
def test_autocast_around_and_inside_gradients_match(outer):
    """Autocast around the call and inside the function: an inner bfloat16 region under a
    float32 call, and an inner autocast-off region (float32 softmax) under a bfloat16 call."""
    torch.manual_seed(0)
    lin1, lin2 = nn.Linear(16, 32), nn.Linear(32, 8)
    ref1, ref2 = copy.deepcopy(lin1), copy.deepcopy(lin2)

    def step(a, b, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.gelu(a(x))
        with torch.autocast("cpu", enabled=False):
            p = torch.softmax(h.float(), dim=-1)
        return b(p * h).float().square().mean(1)

    compiled = torchkiln.compile(lambda x: step(lin1, lin2, x), options={"strict": True})
    for _ in range(2):  # the second call runs the compiled graph on fresh inputs
        x = torch.randn(4, 16, requires_grad=True)
        (x_ref,) = _twin(x)
        with _autocast(outer):
            out = compiled(x)
            want = step(ref1, ref2, x_ref)
        assert out.dtype == want.dtype
        torch.testing.assert_close(out, want, **BF16_TOL)
        g = torch.randn_like(want)
        out.backward(g)
        want.backward(g)
        torch.testing.assert_close(x.grad, x_ref.grad, **BF16_TOL)
    for p, q in zip(
        [*lin1.parameters(), *lin2.parameters()], [*ref1.parameters(), *ref2.parameters()]
    ):
        torch.testing.assert_close(p.grad, q.grad, **BF16_TOL)
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize("call_mode", ["grad", "no_grad"])
def test_enable_grad_inside_no_grad_gradients_match(call_mode):
    """An enable_grad region inside a no_grad one, in a function called with grad on or off:
    what is computed under enable_grad carries a gradient (to w), the rest does not."""
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    (w_ref,) = _twin(w)

    def f(weight, x):
        with torch.no_grad():
            scale = x.abs().amax()
            with torch.enable_grad():
                y = (torch.tanh(x @ weight) / scale).sum(1)
            z = y * 2  # no_grad again: no gradient
        return y, z

    compiled = torchkiln.compile(lambda x: f(w, x), options={"strict": True})
    outer = torch.no_grad() if call_mode == "no_grad" else torch.enable_grad()
    for _ in range(2):
        x = torch.randn(4, 8)
        with outer:
            (y, z), (y_ref, z_ref) = compiled(x), f(w_ref, x)
        torch.testing.assert_close(y, y_ref)
        torch.testing.assert_close(z, z_ref)
        assert (y.requires_grad, z.requires_grad) == (y_ref.requires_grad, z_ref.requires_grad)
        assert y.requires_grad and not z.requires_grad
        g = torch.randn_like(y)
        y.backward(g)
        y_ref.backward(g)
        torch.testing.assert_close(w.grad, w_ref.grad)


def test_retain_graph_second_backward_matches_eager():
    torch.manual_seed(0)
    lin = nn.Linear(8, 4)
    ref = copy.deepcopy(lin)
    compiled = torchkiln.compile(lin, options={"strict": True})
    x = torch.randn(3, 8)
    compiled(x).sum().backward()  # compiles forward and backward
    lin.zero_grad(set_to_none=True)
    x = torch.randn(3, 8)  # fresh input
    loss, want = torch.tanh(compiled(x)).sum(), torch.tanh(ref(x)).sum()
    for _ in range(2):  # the same graph twice: the gradients add up, as eager's
        loss.backward(retain_graph=True)
        want.backward(retain_graph=True)
    for p, q in zip(lin.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    # without retain_graph the saved tensors are freed: a third backward fails as eager's does
    loss.backward()
    want.backward()
    with pytest.raises(RuntimeError, match="second time"):
        want.backward()
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_double_backward_is_a_clear_error_first_order_matches():
    """create_graph=True through a compiled graph is refused with a typed error that says what
    to do (eager computes it; a silently wrong second derivative would be worse), not turned
    into an eager fallback; first-order gradients still equal eager's."""
    torch.manual_seed(0)

    def f(x, w):
        return torch.tanh(x @ w).square().sum()

    compiled = torchkiln.compile(f)  # not strict: the refusal must still reach the caller
    w = torch.randn(6, 5)
    x = torch.randn(4, 6, requires_grad=True)
    (x_ref,) = _twin(x)
    out, want = compiled(x, w), f(x_ref, w)
    (gx,) = torch.autograd.grad(out, x, retain_graph=True)
    (gx_ref,) = torch.autograd.grad(want, x_ref, create_graph=True)
    torch.testing.assert_close(gx, gx_ref)
    gx_ref.sum().backward()  # eager allows it
    assert x_ref.grad is not None
    with pytest.raises(DoubleBackwardUnsupported, match="create_graph=True"):
        torch.autograd.grad(out, x, create_graph=True)


class _ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        y = F.silu(self.c2(y))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gradient_accumulation_over_calls_conv_net(dtype):
    """Three micro-batches, one backward each, no zero_grad between: the accumulated gradients
    and the batch-norm running statistics equal eager's."""
    torch.manual_seed(0)
    model = _ConvNet().train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True})
    tol = BF16_TOL if dtype == "bf16" else {}
    for _ in range(3):
        x = torch.randn(2, 3, 16, 16)
        with _autocast(dtype):
            loss = compiled(x).float().square().mean()
            want = ref(x).float().square().mean()
        torch.testing.assert_close(loss, want, **tol)
        loss.backward()
        want.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}", **tol)
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, msg=lambda m, name=name: f"{name}: {m}", **tol)
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not [f for g in report.graphs for f in g.fallbacks]


def test_dropout_with_a_fixed_seed_is_reproducible():
    """The compiled graph draws its own masks (not eager's generator), so each call is checked
    by hand: kept elements are eager's pre-dropout values over 1 - p, the gradient flows through
    that mask; the same seed gives the same masks, call after call, and another seed others."""
    p = 0.5
    torch.manual_seed(0)
    lin = nn.Linear(16, 32)
    ref = copy.deepcopy(lin)

    def f(m, x):
        return F.dropout(m(x), p, training=True)

    compiled = torchkiln.compile(lambda x: f(lin, x), options={"strict": True})
    x = torch.randn(8, 16)
    runs = {}
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        xs = x.clone().requires_grad_(True)
        out = compiled(xs)
        pre = ref(x)  # eager without dropout: what the kept elements scale
        kept = out != 0
        assert 0 < kept.sum() < kept.numel()
        torch.testing.assert_close(out, torch.where(kept, pre / (1 - p), 0).detach())
        g = torch.randn_like(out)
        out.backward(g)
        torch.testing.assert_close(
            xs.grad, (torch.where(kept, g, 0) / (1 - p)) @ ref.weight.detach()
        )
        runs.setdefault(seed, []).append((kept, xs.grad))
    (k1, g1), (k2, g2) = runs[3]
    assert torch.equal(k1, k2) and torch.equal(g1, g2)
    assert not torch.equal(runs[4][0][0], k1)
