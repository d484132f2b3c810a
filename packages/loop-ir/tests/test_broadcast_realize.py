"""A costly pointwise value read broadcast by a larger consumer is computed once (graph.py's
``_broadcast_factor``): T5's relative position bias, (1, heads, S, S) from bucket arithmetic, a
log and a gather, added to (B, heads, S, S) scores before a softmax. Equal to eager on fresh
random inputs; the bias is its own buffer, with its reason; a cheap broadcast value (a mask's
scale) and a costly one read at its own size stay inline."""

from __future__ import annotations

import torch


def _bucket_bias(table, s):
    """T5-style buckets of relative positions, looked up in a (buckets, heads) table."""
    pos = torch.arange(s)
    rel = pos[None, :] - pos[:, None]
    half = table.shape[0] // 2
    bucket = (rel > 0).long() * half
    n = rel.abs()
    exact = half // 2
    large = (
        exact
        + (torch.log(n.float().clamp(min=1) / exact) / 2.772588722239781 * (half - exact)).long()
    )
    bucket = bucket + torch.where(n < exact, n, large.clamp(max=half - 1))
    return table[bucket].permute(2, 0, 1).unsqueeze(0)  # (1, heads, s, s)


def _realized_for_broadcast(cg) -> list[str]:
    return [
        n.reason for n in cg.graph_ir.nodes if "read broadcast" in (getattr(n, "reason", "") or "")
    ]


def test_position_bias_is_computed_once_and_equals_eager(check):
    def f(scores, table):
        return torch.softmax(scores + _bucket_bias(table, scores.shape[-1]), dim=-1)

    cg = check(f, torch.randn(32, 4, 16, 16), torch.randn(32, 4), atol=1e-5, rtol=1e-5)
    assert _realized_for_broadcast(cg), [getattr(n, "reason", "") for n in cg.graph_ir.nodes]


def test_cheap_or_unbroadcast_values_stay_inline(check):
    def masked(scores, mask):
        return torch.softmax(scores + (1.0 - mask[:, None, None, :]) * -1e4, dim=-1)

    cg = check(masked, torch.randn(8, 4, 16, 16), (torch.rand(8, 16) > 0.3).float())
    assert not _realized_for_broadcast(cg)

    def same_size(scores, table):
        bias = _bucket_bias(table, scores.shape[-1])
        return torch.softmax(scores + bias, dim=-1)

    cg = check(same_size, torch.randn(1, 4, 16, 16), torch.randn(32, 4), atol=1e-5, rtol=1e-5)
    assert not _realized_for_broadcast(cg)
