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


def _expanded_views(cg) -> list[str]:
    return [
        n.reason
        for n in cg.graph_ir.nodes
        if "read expanded by an extern" in (getattr(n, "reason", "") or "")
    ]


def test_value_expanded_into_an_extern_is_stored_at_its_own_size(check):
    """The bias passed expanded to the memory-efficient attention on CUDA (aot-partition's
    masked attention): stored once at (1, heads, S, S), the extern reads a stride-0 view of it,
    where it was computed and written once per batch row."""

    def f(x, table):
        bias = _bucket_bias(table, x.shape[-1]).contiguous().expand(x.shape[0], -1, -1, -1)
        return torch.nn.functional.scaled_dot_product_attention(x, x * 2, x + 1, attn_mask=bias)

    for _ in range(2):  # fresh inputs, each compiled anew
        x, table = torch.randn(8, 4, 16, 16), torch.randn(32, 4)
        cg = check(f, x, table, atol=1e-5, rtol=1e-5)
    assert _expanded_views(cg), [getattr(n, "reason", "") for n in cg.graph_ir.nodes]
    stored = [n for n in cg.graph_ir.nodes if getattr(n, "reason", None) in _expanded_views(cg)]
    assert [int(s) for s in stored[0].get_size()] == [1, 4, 16, 16]


def test_cheap_mask_expanded_into_an_extern_is_a_view_too(check):
    """A padding mask's additive bias, (B, 1, 1, S) expanded over heads and queries (BERT's):
    the extern reads the small buffer, not a (B, heads, S, S) copy."""

    def f(x, keep):
        bias = torch.where(keep, 0.0, -1e4)[:, None, None, :].expand(-1, 4, 16, -1)
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=bias)

    x, keep = torch.randn(8, 4, 16, 16), torch.rand(8, 16) > 0.3
    cg = check(f, x, keep, atol=1e-4, rtol=1e-5)
    sizes = [
        [int(s) for s in n.get_size()]
        for n in cg.graph_ir.nodes
        if "read expanded by an extern" in (getattr(n, "reason", "") or "")
    ]
    assert sizes and all(sz[1:3] == [1, 1] or len(sz) == 2 for sz in sizes), sizes
    assert not any(
        [int(s) for s in getattr(n, "get_size", list)()] == [8, 4, 16, 16]
        and "input of extern" in (getattr(n, "reason", "") or "")
        for n in cg.graph_ir.nodes
    )


def test_position_bias_is_stored_in_the_order_its_permute_reads_it(check):
    """The bias's embedding, (S, S, heads), is read by the scores' add through a permute to
    (heads, S, S): stored with the heads outermost, so that add reads it contiguously."""

    def f(scores, table):
        return torch.softmax(scores + _bucket_bias(table, scores.shape[-1]), dim=-1)

    cg = check(f, torch.randn(32, 4, 16, 16), torch.randn(32, 4), atol=1e-5, rtol=1e-5)
    (bias,) = [n for n in cg.graph_ir.nodes if "read broadcast" in (getattr(n, "reason", "") or "")]
    assert tuple(bias.layout.size) == (16, 16, 4)
    assert tuple(int(s) for s in bias.layout.stride) == (16, 1, 256)
