"""loop-ir's real ``compile_graph`` driving the Triton backend (CPU tensors under Triton's
interpreter), on ATen graphs made with make_fx, checked against eager torch on fresh inputs."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

loop_ir = pytest.importorskip("torchkiln_loop_ir")
codegen_triton = pytest.importorskip("torchkiln_codegen_triton")

# CPU tensors need the interpreter; benchmarks/gpu_triton_smoke.py runs this file with real
# kernels by making CUDA the default device.
pytestmark = [
    pytest.mark.usefixtures("private_cache_dir"),
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") in ("", "0")
        and torch.get_default_device().type != "cuda",
        reason="needs Triton's CPU interpreter (CPU tensors) or CUDA as the default device",
    ),
]


def _check(fn, make_inputs, rtol=1e-4, atol=1e-4):
    inputs = make_inputs()
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    cg = loop_ir.compile_graph(gm, list(inputs), codegen_triton.TritonBackend())
    assert cg.num_kernels == len(cg.kernels) and cg.num_kernels >= 1
    assert all(k.path and k.path.endswith(".py") for k in cg.kernels)
    for _ in range(2):  # fresh inputs each call
        inputs = make_inputs()
        got, expected = cg(*inputs), fn(*inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
    return cg


def test_pointwise_broadcast():
    _check(
        lambda x, y: (torch.relu(x + y) * 2, torch.exp(y)),
        lambda: (torch.randn(7, 257), torch.randn(257)),
    )


def test_softmax_and_argmax():
    _check(lambda x: (torch.softmax(x, -1), torch.argmax(x, 0)), lambda: (torch.randn(33, 65) * 4,))


def test_layer_norm_var_mean():
    _check(
        lambda x, w, b: (torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b), x.var(1)),
        lambda: (torch.randn(9, 65), torch.randn(65), torch.randn(65)),
    )


def test_half_precision_and_gather():
    _check(
        lambda x, i: ((x * 2).sum(1), x[i].float().tanh()),
        lambda: (torch.randn(7, 33, dtype=torch.float16), torch.randint(0, 7, (5,))),
        rtol=2e-3,
        atol=2e-3,
    )


def test_bias_gradient_outer_reductions_transposed_and_split():
    """GPT-2's bias gradients: a pointwise backward of a [B, S, C] activation, kept, and its sum
    over B and S (memory contiguous along C): transposed block layout, split over the rows."""

    def fn(g, h):
        d = (g * torch.tanh(h) + g).to(torch.bfloat16)
        return d, d.float().sum((0, 1)), h.amax(0, keepdim=True), d.view(-1, d.shape[-1]).sum(0)

    cg = _check(
        fn,
        lambda: (torch.randn(4, 96, 80, dtype=torch.bfloat16), torch.randn(4, 96, 80)),
        rtol=2e-2,
        atol=2e-2,
    )
    configs = [k.config for k in cg.kernels]
    if loop_ir.backend.default_parallel_programs(torch.get_default_device()):
        # a GPU: loop-ir splits the sum itself to fill the device (lowering/split_reductions.py),
        # a transposed kernel of partials and a transposed one reducing them
        assert sum(c.transposed for c in configs) >= 2, configs
    else:  # the CPU's interpreter: codegen-triton splits the looped outer reduction
        assert any(c.transposed and c.split >= 2 for c in configs), configs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_lm_head_cross_entropy_training_step(dtype):
    """A language model's last step in training: logits over a vocabulary of 30522 (looped
    rows), cross-entropy, backward, through torchkiln.compile on the Triton backend. The
    forward's max and sum of exp share one loop (the online softmax); the loss and the
    gradients are eager's, within the 16-bit rounding eager itself makes (float64 reference)."""
    import torch.nn.functional as F
    import torchkiln

    # on a GPU, rows enough to fill it: 3 rows would be split into partials by loop-ir
    # (lowering/split_reductions.py), and the online softmax is for looped rows, not split ones
    on_gpu = loop_ir.backend.default_parallel_programs(torch.get_default_device()) > 0
    vocab, width, rows = 30522, 16, 512 if on_gpu else 3

    def step(h, w, t):
        return F.cross_entropy((h @ w.t()).float(), t)

    compiled = torchkiln.compile(step, options={"strict": True, "codegen": "triton"})
    for _ in range(2):  # fresh inputs each call
        h = torch.randn(rows, width, dtype=dtype, requires_grad=True)
        w = (torch.randn(vocab, width, dtype=dtype) * 0.5).requires_grad_()
        t = torch.randint(0, vocab, (rows,))
        h2, w2 = (h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_())
        h64, w64 = (h.detach().double().requires_grad_(), w.detach().double().requires_grad_())
        loss, ref, ref64 = compiled(h, w, t), step(h2, w2, t), step(h64, w64, t)
        assert (loss.double() - ref64).abs() <= 2 * (ref.double() - ref64).abs() + 1e-5
        loss.backward()
        ref.backward()
        ref64.backward()
        for got, eager, exact in ((h.grad, h2.grad, h64.grad), (w.grad, w2.grad, w64.grad)):
            ours = (got.double() - exact).abs().max()
            theirs = (eager.double() - exact).abs().max()
            assert ours <= 2 * theirs + 1e-5 * (1 + exact.abs().max()), (ours, theirs)
    report = torchkiln.report(compiled)
    forward_kernels = [
        open(path).read()
        for key, path in report.graphs[0].artifacts.items()
        if key.startswith("forward.kernel.")
    ]
    assert any("online softmax" in src for src in forward_kernels)
