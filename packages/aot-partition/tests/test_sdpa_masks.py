"""Input-free attention masks passed to scaled_dot_product_attention (aot-partition's
sdpa_masks.py): a mask that keeps everything is dropped, one that keeps the lower triangle
becomes ``is_causal=True``, anything else stays; every graph equals eager on fresh random inputs,
inference and gradients."""

from __future__ import annotations

import copy
import math
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx
from torchkiln_aot_partition import aot_compile
from torchkiln_aot_partition.sdpa_masks import simplify_sdpa_masks

B, H, L, D = 2, 3, 8, 16
ALL = slice(None)


def _lower_bool(c, length=L, source=L):
    """Transformers 5's causal mask: key index <= query index, from aranges, expanded."""
    rows = c(torch.arange, length)
    cols = c(torch.arange, source)
    keep = c(
        operator.le, c(operator.getitem, cols, (None, ALL)), c(operator.getitem, rows, (ALL, None))
    )
    return c("expand", c(operator.getitem, keep, (None, None)), B, 1, length, source)


def _upper_filled(c, fill, diagonal=1):
    """Older transformers' float causal mask: a full matrix of ``fill`` kept above the diagonal."""
    full = c(torch.full, (L, L), fill)
    return c("expand", c(operator.getitem, c("triu", full, diagonal), (None, None)), B, 1, L, L)


def _padding_of_ones(c):
    """BERT's mask when no attention_mask is given: ones, turned into an additive mask."""
    ones = c(torch.ones, B, L)
    kept = c(operator.sub, 1.0, c(operator.getitem, ones, (ALL, None, None, ALL)))
    return c(operator.mul, kept, torch.finfo(torch.float32).min)


MASKS = {
    "lower_bool": (_lower_bool, "causal"),
    "upper_min": (lambda c: _upper_filled(c, torch.finfo(torch.float32).min), "causal"),
    "upper_inf": (lambda c: _upper_filled(c, -math.inf), "causal"),
    "all_true": (lambda c: c(torch.ones, B, 1, L, L, dtype=torch.bool), "none"),
    "padding_of_ones": (_padding_of_ones, "none"),
    # left as they are
    "band": (lambda c: _upper_filled(c, -math.inf, diagonal=2), "kept"),
    "finite_fill": (lambda c: _upper_filled(c, -10000.0), "kept"),
    "random": (lambda c: c(operator.gt, c(torch.rand, L, L), -1.0), "kept"),
}


def _graph(kind, *, mask_input: bool = False) -> fx.GraphModule:
    """sdpa(q, k, v, attn_mask=mask): the mask made by ``MASKS[kind]``'s builder (or by
    ``kind`` itself, a builder), or a placeholder."""
    graph = fx.Graph()
    q, k, v = (graph.placeholder(name) for name in "qkv")

    def c(fn, *args, **kwargs):
        if isinstance(fn, str):
            return graph.call_method(fn, args, kwargs)
        return graph.call_function(fn, args, kwargs)

    if mask_input:
        mask = graph.placeholder("m")
    else:
        mask = (MASKS[kind][0] if isinstance(kind, str) else kind)(c)
    out = graph.call_function(F.scaled_dot_product_attention, (q, k, v), {"attn_mask": mask})
    graph.output(out)
    return fx.GraphModule(torch.nn.Module(), graph)


def _sdpa(gm):
    (node,) = [n for n in gm.graph.nodes if n.target is F.scaled_dot_product_attention]
    return node


def _qkv(dtype, requires_grad=False, source=L):
    return [
        torch.randn(B, H, n, D, dtype=dtype, requires_grad=requires_grad)
        for n in (L, source, source)
    ]


@pytest.mark.parametrize("kind", list(MASKS))
def test_each_mask_is_dropped_made_causal_or_kept(kind):
    gm = _graph(kind)
    (line,) = simplify_sdpa_masks(gm)
    node = _sdpa(gm)
    expected = MASKS[kind][1]
    assert ("dropped" in line) == (expected != "kept"), line
    assert node.kwargs.get("attn_mask") is None or expected == "kept"
    assert node.kwargs.get("is_causal", False) == (expected == "causal"), line
    if expected != "kept":  # the mask's nodes went with it
        assert [n.op for n in gm.graph.nodes] == ["placeholder"] * 3 + ["call_function", "output"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("kind", list(MASKS))
def test_compiled_equals_eager(kind, dtype, compiler):
    original = _graph(kind)
    model = copy.deepcopy(original)
    with torch.no_grad():
        compiled = aot_compile(_graph(kind), _qkv(dtype), fw_compiler=compiler)
        for _ in range(2):
            qkv = _qkv(dtype)
            (got,) = compiled(*qkv)
            want = model(*qkv)
            # the random mask keeps everything however drawn: the same attention
            tolerance = 1e-5 if dtype == torch.float32 else 2e-2
            torch.testing.assert_close(got, want, atol=tolerance, rtol=0)


def test_gradients_through_the_causal_call_equal_eager(compiler):
    """The rewrite happens before the joint trace: the backward is the causal kernel's."""
    model = _graph("lower_bool")
    compiled = aot_compile(_graph("lower_bool"), _qkv(torch.float32, True), fw_compiler=compiler)
    qkv = _qkv(torch.float32, True)
    qkv2 = [t.detach().clone().requires_grad_() for t in qkv]
    (got,) = compiled(*qkv)
    want = model(*qkv2)
    torch.testing.assert_close(got, want)
    tangent = torch.randn_like(want)
    got.backward(tangent)
    want.backward(tangent)
    for a, b in zip(qkv, qkv2):
        torch.testing.assert_close(a.grad, b.grad)


def test_a_mask_from_an_input_is_kept(compiler):
    gm = _graph("", mask_input=True)
    (line,) = simplify_sdpa_masks(gm)
    assert "kept" in line and "input" in line
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    with torch.no_grad():
        compiled = aot_compile(
            _graph("", mask_input=True), [*_qkv(torch.float32), mask], fw_compiler=compiler
        )
        qkv = _qkv(torch.float32)
        band = torch.ones(L, L, dtype=torch.bool).tril() & ~torch.ones(L, L, dtype=torch.bool).tril(
            -3
        )
        torch.testing.assert_close(
            compiled(*qkv, band)[0], F.scaled_dot_product_attention(*qkv, attn_mask=band)
        )


def test_a_causal_mask_of_unequal_lengths_is_kept():
    """is_causal aligns the triangle to the top left; a mask over more keys than queries is
    left to itself rather than argue which alignment it meant."""
    gm = _graph(lambda c: _lower_bool(c, L, L + 4))
    (line,) = simplify_sdpa_masks(gm)
    assert "kept" in line
    qkv = _qkv(torch.float32, source=L + 4)
    torch.testing.assert_close(gm(*qkv), copy.deepcopy(gm)(*qkv))


def test_a_mask_read_from_a_buffer_is_kept():
    """A buffer may change between calls: its value now decides nothing."""

    class Causal(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("keep", torch.ones(L, L, dtype=torch.bool).tril())

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep)

    gm = fx.symbolic_trace(Causal())
    (line,) = simplify_sdpa_masks(gm)
    assert "kept" in line
    assert _sdpa(gm).kwargs["attn_mask"] is not None


def test_a_mask_too_large_to_compute_at_compile_time_is_kept(monkeypatch):
    from torchkiln_aot_partition import sdpa_masks

    monkeypatch.setattr(sdpa_masks, "MAX_ELEMENTS", 8)
    gm = _graph("lower_bool")
    (line,) = simplify_sdpa_masks(gm)
    assert "kept" in line and "elements" in line
    qkv = _qkv(torch.float32)
    torch.testing.assert_close(gm(*qkv), _graph("lower_bool")(*qkv))
