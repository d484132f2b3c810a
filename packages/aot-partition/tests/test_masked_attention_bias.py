"""The bias handed to the memory-efficient kernel (aot-partition's _masked_attention.py): the
same attention as eager's for boolean and additive masks, key lengths that are not a multiple of
16, and a permuted additive bias (T5's position bias); always last-dimension contiguous with
aligned rows, as the CUDA kernel requires. The kernel itself is CUDA only: here a stand-in that
checks its bias and computes the attention with torch's reference implementation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchkiln_aot_partition import _masked_attention as M


class _Kernel:
    """Stand-in for aten._scaled_dot_product_efficient_attention."""

    def __init__(self):
        self.biases = []

    def _scaled_dot_product_efficient_attention(self, q, k, v, bias, lse, p, causal, scale=None):
        assert bias.stride(-1) == 1 and all(s % 16 == 0 for s in bias.stride()[:-1]), bias.stride()
        assert k.shape[2] % 16 == 0 and bias.shape[-1] == k.shape[2]
        self.biases.append(bias)
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale),)


@pytest.fixture(name="kernel")
def _kernel(monkeypatch):
    kernel = _Kernel()
    monkeypatch.setattr(M, "aten", kernel)
    return kernel


@pytest.mark.parametrize("length", [64, 77, 5])
@pytest.mark.parametrize("kind", ["bool", "additive", "permuted_additive"])
def test_masked_attention_equals_eager(kernel, kind, length):
    q, k, v = (torch.randn(3, 4, length, 16, dtype=torch.float64) for _ in range(3))
    if kind == "bool":
        keep = torch.rand(3, length) > 0.3
        keep[:, 0] = True
        mask = keep[:, None, None, :].expand(3, 1, length, length)
    elif kind == "additive":
        mask = torch.randn(length, length, dtype=torch.float64)
    else:  # T5: a position bias computed as (L, S, H) and permuted to (1, H, L, S)
        mask = torch.randn(length, length, 4, dtype=torch.float64).permute(2, 0, 1).unsqueeze(0)
    biases: dict = {}
    for scale in (None, 0.3):
        got = M.masked_attention(q, k, v, mask, scale, biases)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        torch.testing.assert_close(got, want)
    assert len(biases) == 1  # one bias per mask


def test_only_masks_torch_refuses_are_rerouted():
    """Padding masks expanded along the queries (BERT) and key-strided biases (T5) are
    candidates; a full causal mask (GPT-2, Llama) is left to torch's own fused kernel."""
    keep = torch.rand(2, 9) > 0.3
    padding = keep[:, None, None, :].expand(2, 1, 9, 9)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[None, None].expand(2, 1, 9, 9)
    position_bias = torch.randn(9, 9, 4).permute(2, 0, 1)[None]
    assert M._unusual_mask(padding) and M._unusual_mask(keep[:, None, None, :])
    assert M._unusual_mask(position_bias)
    assert not M._unusual_mask(causal) and not M._unusual_mask(torch.randn(9, 9))
