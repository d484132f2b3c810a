"""Combo kernels end to end (loop-ir's ``combos.py``, codegen-triton's ``_combo.py``): a training
step whose small independent pointwise kernels (autocast's casts of the parameters, the
gradients' casts back, batch norms' ``num_batches_tracked += 1``) launch as one kernel. Triton's
interpreter runs them on the CPU, with ``combo_kernels="always"`` (the default combines kernels
on CUDA devices only). Each case compares with eager on fresh inputs and, bit for bit, with the
same graphs compiled without combo kernels."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch import nn

os.environ.setdefault("TRITON_INTERPRET", "1")

import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        y = self.bn2(self.bn1(self.conv(x)).relu())
        y = y.mean((2, 3))
        return self.head(self.fc2(self.fc1(y).relu()).relu())


def _step(model, x, target, autocast):
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        out = model(x)
    loss = torch.nn.functional.cross_entropy(out.float(), target)
    loss.backward()
    return out


def _compile(model, mode):
    options = {"codegen": "triton", "strict": True, "loop_ir": {"combo_kernels": mode}}
    return torchkiln.compile(model, options=options)


_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(
            "cpu", marks=pytest.mark.skipif(not _INTERPRET, reason="Triton interpreted only")
        ),
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(
                _INTERPRET or not torch.cuda.is_available(), reason="a GPU, real kernels"
            ),
        ),
    ],
)
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_training_step_with_combo_kernels(autocast, device):
    torch.manual_seed(0)
    base = _Net().to(device)
    models = {name: copy.deepcopy(base) for name in ("eager", "always", "never")}
    compiled = {name: _compile(models[name], name) for name in ("always", "never")}
    for _ in range(2):  # the second step reads running statistics the first one wrote
        x = torch.randn(4, 3, 6, 6, device=device)
        target = torch.randint(0, 5, (4,), device=device)
        outs = {"eager": _step(models["eager"], x, target, autocast)}
        for name, fn in compiled.items():
            outs[name] = _step(fn, x, target, autocast)
        assert torch.equal(outs["always"], outs["never"])
        tol = {"atol": 2e-2, "rtol": 2e-2} if autocast else {}
        torch.testing.assert_close(outs["always"], outs["eager"], **tol)
        named = {k: dict(m.named_parameters()) for k, m in models.items()}
        for pname, p in named["eager"].items():
            assert torch.equal(named["always"][pname].grad, named["never"][pname].grad), pname
            torch.testing.assert_close(named["always"][pname].grad, p.grad, **tol)
        buffers = {k: dict(m.named_buffers()) for k, m in models.items()}
        for bname, b in buffers["eager"].items():
            assert torch.equal(buffers["always"][bname], buffers["never"][bname]), bname
            torch.testing.assert_close(buffers["always"][bname], b, **tol)
        for m in models.values():
            m.zero_grad()
    with_combos = torchkiln.report(compiled["always"]).graphs
    without = torchkiln.report(compiled["never"]).graphs
    assert all(not g.fallbacks for g in with_combos)
    # each batch norm's num_batches_tracked += 1 (two), and under autocast the casts of the
    # convolution's and linear layers' weights and biases, run as combo kernels: fewer launches
    assert sum(g.kernels for g in with_combos) < sum(g.kernels for g in without)
    sources = [open(p).read() for g in with_combos for p in g.artifacts.values() if p]
    assert any("combo kernel" in s for s in sources)


@pytest.mark.skipif(not _INTERPRET, reason="Triton interpreted only")
def test_graphs_with_combo_kernels_load_from_the_cache():
    """A Triton graph saved to the graph cache loads again, combo kernels included. Before
    loop-ir 0.8.24 every such entry was found corrupt (a loaded kernel step had no buffer
    specs, and codegen-triton reads their dtypes: KeyError) and compiled again."""
    x, target = torch.randn(4, 3, 6, 6), torch.randint(0, 5, (4,))
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        model = _Net()
        compiled = _compile(model, "always")
        out = _step(compiled, x, target, True)
        results.append((out, [p.grad for p in model.parameters()]))
        verdicts = [g.cache for g in torchkiln.report(compiled).graphs]
    assert verdicts == ["hit"]
    assert torch.equal(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.equal(a, b)


def _random_program(rng):
    """A function of independent small pointwise chains of different sizes (casts, math, an
    input's counter bumped in place), some read by a product, and the inputs to call it with."""
    n = rng.randint(3, 7)
    sizes = [rng.choice([1, 3, 17, 64, 100, 257, 1000, 1500]) for _ in range(n)]
    ops = [rng.choice(["cast", "sin", "scale", "bump"]) for _ in range(n)]
    mm = rng.random() < 0.6

    def f(*xs):
        outs = []
        for x, op in zip(xs, ops):
            if op == "cast":
                outs.append(x.to(torch.bfloat16))
            elif op == "sin":
                outs.append(torch.sin(x) * 2)
            elif op == "scale":
                outs.append(x * 0.5 + 1)
            else:
                x.add_(1)  # a mutated input: its new value may be written in place
        if mm:
            a = xs[0].reshape(-1, 1).float()
            outs.append(a @ a.t()[:1])  # an extern between the kernels
        return outs

    return f, [torch.randn(s) for s in sizes]


@pytest.mark.skipif(not _INTERPRET, reason="Triton interpreted only")
@pytest.mark.parametrize("seed", range(12))
def test_random_independent_kernels(seed):
    """Random sets of independent pointwise kernels (which the scheduler cannot fuse: their
    sizes differ) around an extern call, against eager, with combo kernels and without."""
    import random

    f, inputs = _random_program(random.Random(seed))
    results, kernels = {}, {}
    for mode in ("always", "never"):
        args = [x.clone() for x in inputs]
        compiled = _compile(f, mode)
        results[mode] = (compiled(*args), args)
        report = torchkiln.report(compiled)
        assert all(not g.fallbacks for g in report.graphs)
        kernels[mode] = sum(g.kernels for g in report.graphs)
    assert kernels["always"] < kernels["never"]  # every seed here forms a combo (2-6 members)
    args = [x.clone() for x in inputs]
    want = f(*args)
    for mode, (got, written) in results.items():
        assert len(got) == len(want), mode
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
        for a, b in zip(written, args):
            assert torch.equal(a, b), mode  # the inputs bumped in place, exactly as eager


@pytest.mark.skipif(not _INTERPRET, reason="Triton interpreted only")
def test_a_member_checking_its_divisor():
    """A member that checks its integer divisor (under the interpreter, as eager's CPU kernels
    raise "ZeroDivisionError") reports into the combo's status word (fuzz seed 31332 of the
    pooling shares: the combo refused such a member and the graph ran eagerly)."""

    def f(a, b, c):
        return a // b, c.to(torch.bfloat16), torch.cos(c[:3]) + 1

    # not strict: a kernel's error is replayed eagerly, which raises eager's own exception
    options = {"codegen": "triton", "loop_ir": {"combo_kernels": "always"}}
    compiled = torchkiln.compile(f, options=options)
    a, c = torch.randint(-50, 50, (40,)), torch.randn(300)
    b = torch.randint(1, 7, (40,))
    for got, want in zip(compiled(a, b, c), f(a, b, c)):
        torch.testing.assert_close(got, want)
    b[5] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as want:
        f(a, b, c)
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as got:
        compiled(a, b, c)
    assert str(got.value) == str(want.value)
    report = torchkiln.report(compiled)
    assert report.eager_fallbacks == [] and all(not g.fallbacks for g in report.graphs)
    sources = [open(p).read() for g in report.graphs for p in g.artifacts.values() if p]
    assert any("combo kernel" in s and "tk_status" in s for s in sources)
