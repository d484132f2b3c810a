"""Batch norm's gradients where eager's own CPU kernel is wrong: a batch of one whose incoming
gradient has channels-last strides, as ``bn(x).flatten(2).transpose(1, 2)`` (XCiT's patch
embedding) hands back. torch 2.13's ``native_batch_norm_backward`` on the CPU then sums the
gradient in the wrong order (``torch.autograd.gradcheck`` fails in float64; a batch of two is
right). torchkiln decomposes batch norm, so its gradients are the true ones: this compares them
with float64 references that avoid the kernel (the eval-mode affine formula, and the training
formula written out), so a change that followed eager's kernel here would be seen.

timm's xcit_nano_12_p16_224 and rexnet_100 were "FAIL" in ``model_breadth.py --train`` (batch 1)
for this reason: their gradients agree with such a float64 reference to 2e-6 and 6e-7.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F
import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _model(training: bool):
    def f(x, w, b, rm, rv):
        y = F.batch_norm(x, rm, rv, w, b, training=training, eps=1e-5)
        return y.flatten(2).transpose(1, 2)

    return f


def _reference(training: bool):
    """The same in float64, batch norm written out (no ATen batch-norm kernel)."""

    def f(x, w, b, rm, rv):
        if training:
            mean = x.mean((0, 2, 3), keepdim=True)
            var = x.var((0, 2, 3), keepdim=True, correction=0)
        else:
            mean, var = rm.view(1, -1, 1, 1), rv.view(1, -1, 1, 1)
        y = (x - mean) * (var + 1e-5).rsqrt() * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)
        return y.flatten(2).transpose(1, 2)

    return f


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("training", [True, False])
def test_gradients_follow_the_math_not_eagers_kernel(training, codegen):
    torch.manual_seed(0)
    compiled = torchkiln.compile(_model(training), options={"strict": True, "codegen": codegen})
    for _ in range(2):
        x = torch.randn(1, 3, 4, 4)
        w, b = torch.randn(3), torch.randn(3)
        rm, rv = torch.randn(3), torch.rand(3) + 0.5
        t = torch.randn(1, 16, 3)
        leaves = [
            x.clone().requires_grad_(),
            w.clone().requires_grad_(),
            b.clone().requires_grad_(),
        ]
        got = torch.autograd.grad(compiled(*leaves, rm.clone(), rv.clone()), leaves, t)
        ref_leaves = [v.double().requires_grad_() for v in (x, w, b)]
        want = torch.autograd.grad(
            _reference(training)(*ref_leaves, rm.double(), rv.double()), ref_leaves, t.double()
        )
        for g, r in zip(got, want):
            torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-5)


def _strided_weight(x, w_buffer, b):
    return F.batch_norm(x, None, None, w_buffer[::2], b, training=True)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_a_strided_weight_gets_the_true_input_gradient(codegen):
    """torch 2.13's CPU batch-norm backward is wrong for a weight of stride 2 (a step slice):
    ``torch.autograd.gradcheck`` fails in float64, and the input's gradient differs from the
    one with a contiguous copy of the same weight (by 2.1 in float32 on a 3x3x1 input; found by
    the fuzzer's batch norm programs, seed 5933 of ``--nn-share 0.5``, whose float64 reference
    ran the same kernel and so agreed with eager). torchkiln's gradient is the math's: equal to
    the float64 formula's, and to eager's with the weight made contiguous."""
    torch.manual_seed(0)
    compiled = torchkiln.compile(_strided_weight, options={"strict": True, "codegen": codegen})
    for shape in ((3, 3, 1), (4, 3, 2)):
        x = torch.randn(shape)
        w_buffer, b = torch.randn(6), torch.randn(3)
        t = torch.randn(shape)
        leaf = x.clone().requires_grad_()
        (got,) = torch.autograd.grad(compiled(leaf, w_buffer, b), [leaf], t)
        ref = x.double().requires_grad_()
        dims = [0, *range(2, len(shape))]
        mean = ref.mean(dims, keepdim=True)
        var = ref.var(dims, keepdim=True, correction=0)
        view = [1, -1, *[1] * (len(shape) - 2)]
        y = (ref - mean) * (var + 1e-5).rsqrt() * w_buffer[::2].double().view(view)
        (want,) = torch.autograd.grad(y + b.double().view(view), [ref], t.double())
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        contiguous = x.clone().requires_grad_()
        out = F.batch_norm(contiguous, None, None, w_buffer[::2].contiguous(), b, training=True)
        torch.testing.assert_close(got, torch.autograd.grad(out, [contiguous], t)[0])


def _eval_with_running_mean(x, mean_buffer, var, w, b):
    return F.batch_norm(x, mean_buffer[::2], var, w, b, training=False)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_a_strided_running_mean_gets_the_true_weight_gradient(codegen):
    """torch 2.13's CPU batch norm in eval mode gets the weight's gradient wrong for a running
    mean of stride 2 (by 3.1 on a 1x3x1 input; fuzz seed 6779 of the mixed shares). torchkiln's
    eval batch norm is pointwise math: its gradient equals the float64 formula's."""
    torch.manual_seed(0)
    compiled = torchkiln.compile(
        _eval_with_running_mean, options={"strict": True, "codegen": codegen}
    )
    for shape in ((1, 3, 1), (4, 3, 5)):
        x, mean_buffer = torch.randn(shape), torch.randn(6)
        var, b = torch.rand(3) + 0.5, torch.randn(3)
        w = torch.randn(3, requires_grad=True)
        t = torch.randn(shape)
        (got,) = torch.autograd.grad(compiled(x, mean_buffer, var, w, b), [w], t)
        w64 = w.detach().double().requires_grad_()
        view = [1, -1, *[1] * (len(shape) - 2)]
        mean = mean_buffer[::2].double().view(view)
        y = (x.double() - mean) * (var.double().view(view) + 1e-5).rsqrt() * w64.view(view)
        (want,) = torch.autograd.grad(y + b.double().view(view), [w64], t.double())
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
