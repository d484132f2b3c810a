"""XGLM's attention (a bmm's scores viewed as (batch, heads, t, t), masked, clamped at the
dtype's least value, a softmax, the heads transposed back) trained through ``torchkiln.compile``:
the softmax backward's kernel has its x dims merged (``merge_dims``), and a node reading a
transposed view of a value the kernel computed composed the merged index in a nested form that
the C++ code generator did not match to the write (``CodegenError``: the backward ran eagerly;
breadth run of session 39). Every code generator, gradients against eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch
import torchkiln
from codegens import CODEGENS

B, H, T, D = 2, 4, 16, 8


def attention(q, k, v, mask):
    w = torch.bmm(q, k.transpose(1, 2)).view(B, H, T, T) + mask
    w = torch.max(w, torch.tensor(torch.finfo(w.dtype).min))
    w = torch.softmax(w.view(B * H, T, T), dim=-1)
    return torch.bmm(w, v).view(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_masked_attention_backward_compiles_with_merged_dims(codegen):
    compiled = torchkiln.compile(attention, options={"strict": True, "codegen": codegen})
    for _ in range(2):
        q, k, v = (torch.randn(B * H, T, D) for _ in range(3))
        mask = torch.zeros(B, 1, T, T)
        mask[..., torch.randint(1, T, ()) :] = torch.finfo(torch.float32).min
        ours = [t.clone().requires_grad_() for t in (q, k, v)]
        eager = [t.clone().requires_grad_() for t in (q, k, v)]
        out, expected = compiled(*ours, mask), attention(*eager, mask)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        g = torch.randn_like(out)
        out.backward(g)
        expected.backward(g)
        for a, b in zip(ours, eager):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
