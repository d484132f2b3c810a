"""Masked attention on CUDA traced to the memory-efficient fused kernel (aot-partition's
_masked_attention.py), not to the float32 math path: inference and training equal eager on
fresh random inputs (boolean and additive masks, key lengths that are not a multiple of 16,
padding masks as Hugging Face builds them), with a fused kernel, never the math path, in the
compiled graph.
CUDA only: the kernel exists only there (the GPU session runs this file)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import torchkiln
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class MaskedSelfAttention(nn.Module):
    def __init__(self, width=64, heads=4):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(width, 3 * width), nn.Linear(width, width), heads

    def forward(self, x, mask):
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, s, w))


def _mask(kind, batch, length, dtype=torch.bfloat16):
    keep = torch.ones(batch, length, dtype=torch.bool, device="cuda")
    keep[0, length - 5 :] = False  # padding at the end of the first sequence
    mask = keep[:, None, None, :].expand(batch, 1, length, length)
    if kind == "bool":
        return mask
    if kind == "permuted_additive":  # T5's position bias: (L, S, H) permuted to (1, H, L, S)
        return torch.randn(length, length, 4, device="cuda", dtype=dtype).permute(2, 0, 1)[None]
    # an additive padding mask, broadcast along the queries as Hugging Face builds it
    additive = torch.zeros(batch, 1, 1, length, device="cuda", dtype=dtype)
    return additive.masked_fill(~keep[:, None, None, :], -1e4).expand(batch, 1, length, length)


def _externs(compiled):
    return [c for g in torchkiln.report(compiled).graphs for c in g.extern_calls]


def _fused(compiled) -> bool:
    """A fused attention kernel (torch's own pick, or the rerouted memory-efficient one), and no
    batched matrix multiply of the math path."""
    calls = _externs(compiled)
    return any("attention" in c for c in calls) and not any("bmm" in c for c in calls)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("length", [64, 77])
@pytest.mark.parametrize("kind", ["bool", "additive", "permuted_additive"])
def test_inference_equals_eager(kind, length, dtype):
    """float32 too: T5's permuted position bias sends eager to the math path there as well."""
    model = MaskedSelfAttention().cuda().to(dtype).eval()
    x = torch.randn(3, length, 64, device="cuda", dtype=dtype)
    mask = _mask(kind, 3, length, dtype)
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False})
    with torch.no_grad():
        got, expected = compiled(x, mask), model(x, mask)
        reference = model.double()(x.double(), mask if kind == "bool" else mask.double())
    error, eager_error = (
        (got.double() - reference).abs().max(),
        (expected.double() - reference).abs().max(),
    )
    assert error <= 3 * eager_error + 1e-3, (error, eager_error)
    assert _fused(compiled), _externs(compiled)


def test_training_gradients_equal_eager():
    model = MaskedSelfAttention().cuda()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(twin, options={"strict": True, "graph_cache": False})
    x = torch.randn(3, 77, 64, device="cuda")
    mask = _mask("bool", 3, 77)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(x, mask).float().pow(2).mean().backward()
        compiled(x, mask).float().pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=3e-2, atol=3e-3, msg=name)
    assert _fused(compiled), _externs(compiled)
