"""A random draw is one value wherever it is read: the mask a dropout-like output shows is the
mask its gradient uses, and a 16-bit ``rand`` is a 16-bit value (rounded once, before any
comparison) whether a kernel stores it or inlines it, as eager's stored tensor is.

Each case runs forward and backward through the whole pipeline (strict: no eager fallback) on
the C++ backend and on Triton (its CPU interpreter), for native_dropout, ``bernoulli_`` and
``rand_like(x) < p`` (the forms torch's versions decompose ``F.dropout`` into), in float32,
bfloat16 and float16, on fresh inputs with no zeros (so a zero output is a dropped element)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln
from codegens import CODEGENS

pytestmark = pytest.mark.usefixtures("private_cache_dir")

P = 0.25  # drop probability
KEEP = 1 - P

FORMS = {
    "F.dropout": lambda x: F.dropout(x * 2, P, training=True),
    "native_dropout": lambda x: torch.ops.aten.native_dropout(x * 2, P, True)[0],
    "bernoulli_": lambda x: x * 2 * torch.empty_like(x).bernoulli_(KEEP) / KEEP,
    "rand_like<p": lambda x: x * 2 * (torch.rand_like(x) < KEEP) / KEEP,
}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _nonzero_randn(*size, dtype):
    # torch 2.11's CPU randn in 16 bits draws exact zeros (its Box-Muller takes log(1 - u) in
    # bfloat16, where 1 - u rounds to 1 for small u): a zero input would read as a dropped element
    x = torch.randn(*size, dtype=dtype)
    return torch.where(x == 0, torch.ones((), dtype=dtype), x)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_output_mask_is_the_gradient_mask(form, dtype, codegen):
    f = FORMS[form]
    compiled = torchkiln.compile(f, options={"strict": True, "codegen": codegen})
    for _ in range(2):  # fresh inputs, fresh draws
        x = _nonzero_randn(128, 96, dtype=dtype).requires_grad_(True)
        out = compiled(x)
        kept = out != 0
        assert 0.6 < kept.float().mean().item() < 0.9  # about 1 - P kept
        # the output: eager's dropout of 2x through the mask it shows (x * 2 * mask / keep)
        want = f_eager_through(f, x.detach(), kept)
        torch.testing.assert_close(out, want, **_tol(dtype))
        g = _nonzero_randn(128, 96, dtype=dtype)
        out.backward(g)
        # the gradient: eager's backward through that same mask
        x_ref = x.detach().clone().requires_grad_(True)
        f_eager_through(f, x_ref, kept).backward(g)
        assert torch.equal(x.grad != 0, kept), (
            f"{int(((x.grad != 0) != kept).sum())} elements disagree"
        )
        torch.testing.assert_close(x.grad, x_ref.grad, **_tol(dtype))
    report = torchkiln.report(compiled)
    assert not report.eager_fallbacks and report.graphs


def f_eager_through(f, x, kept):
    """Eager's value of form ``f`` had it drawn ``kept``: each form is 2x scaled by 1/keep where
    kept (native_dropout multiplies by the scale, the others divide by keep: same rounding in
    float32 and within one 16-bit ulp otherwise, hence the tolerance)."""
    return x * 2 * kept.to(x.dtype) / KEEP


def _tol(dtype):
    return {} if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_a_16_bit_draw_is_rounded_where_it_is_inlined(dtype, codegen):
    """``rand_like(x) == 0.75`` reads the draw inlined (never stored): eager's draw is a 16-bit
    value, which equals 0.75 for one float32 draw in 2**8 (bfloat16) or 2**11 (float16), while an
    unrounded float32 draw almost never does. The same draw stored and compared agrees."""

    def inlined(x):  # one reader: the draw is never stored
        return (torch.rand_like(x) == 0.75).sum()

    def stored(x):  # three readers: stored once, read back
        u = torch.rand_like(x)
        return u < 0.75, u * 1, (u == 0.75).sum()

    x = torch.empty(512, 512, dtype=dtype)
    spacing = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11  # a 16-bit ulp in [0.5, 1)
    expected = x.numel() * spacing
    compiled = torchkiln.compile(inlined, options={"strict": True, "codegen": codegen})
    hits = compiled(x)
    assert 0.7 * expected < hits.item() < 1.3 * expected, (hits.item(), expected)
    compiled_stored = torchkiln.compile(stored, options={"strict": True, "codegen": codegen})
    keep, u, hits = compiled_stored(x)
    assert torch.equal(keep, u < 0.75) and hits.item() == (u == 0.75).sum().item()
    assert u.dtype == dtype and 0 <= u.min() and u.max() < 1
    assert not torchkiln.report(compiled).eager_fallbacks
    assert not torchkiln.report(compiled_stored).eager_fallbacks
