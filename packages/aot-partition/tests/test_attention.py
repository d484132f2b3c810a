"""Hand-written attention routed to scaled_dot_product_attention on the inference path: every
variant equals eager on fresh random inputs (float32 and bfloat16, against an fp64 reference for
the latter), the SDPA op is in the graph, and what must not be rewritten is left alone."""

from __future__ import annotations

import math

import pytest
import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torchkiln_aot_partition import aot_compile

aten = torch.ops.aten


def _table(kind):
    """torch's core table minus the SDPA kernels (softmax stays ``_softmax``), or with softmax
    decomposed into amax/sub/exp/sum/div as loop-ir's table does; "raw": the core table, which
    decomposes the SDPA kernels into their math."""
    core = core_aten_decompositions()
    table = dict(core.items()) if hasattr(core, "items") else dict(core)
    if kind != "raw":
        table = {op: fn for op, fn in table.items() if "scaled_dot_product" not in str(op)}
    if kind == "decomposed":
        table.update(get_decompositions([aten._softmax]))
    return table


class Attention(torch.nn.Module):
    """softmax(q @ k^T * s + mask) @ v written by hand, in the forms models use."""

    def __init__(
        self,
        seq,
        head,
        mask="none",
        scale="mul",
        softmax_dim=-1,
        return_weights=False,
        fill=-math.inf,
        dropout=0.0,
    ):
        super().__init__()
        self.seq, self.head, self.mask, self.scale = seq, head, mask, scale
        self.softmax_dim, self.return_weights, self.fill = softmax_dim, return_weights, fill
        self.dropout = dropout

    def forward(self, q, k, v, m=None):
        scores = q @ k.transpose(-2, -1)
        if self.scale == "mul":
            scores = scores * (1.0 / math.sqrt(self.head))
        elif self.scale == "div":
            scores = scores / math.sqrt(self.head)
        if self.mask == "causal":
            causal = torch.ones(self.seq, self.seq, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(causal, self.fill)
        elif self.mask == "triu2":  # a constant mask that is not the causal one
            scores = scores.masked_fill(
                torch.ones(self.seq, self.seq, dtype=torch.bool).triu(2), self.fill
            )
        elif self.mask == "bool":
            scores = scores.masked_fill(m, self.fill)
        elif self.mask == "add":
            scores = scores + m
        weights = scores.softmax(dim=self.softmax_dim)
        if self.dropout:
            weights = torch.nn.functional.dropout(weights, self.dropout, training=True)
        out = weights @ v
        return (out, weights) if self.return_weights else out


def _inputs(mask, dtype, b=2, h=3, t=8, d=16):
    q, k, v = (torch.randn(b, h, t, d, dtype=dtype) for _ in range(3))
    if mask == "bool":
        return [q, k, v, torch.rand(b, 1, t, t) < 0.3]
    if mask == "add":
        return [q, k, v, torch.randn(b, 1, 1, t, dtype=dtype)]
    return [q, k, v]


def _sdpa_nodes(gm):
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and "scaled_dot_product" in str(n.target)
    ]


def _mask_in_graph(gm):
    """fx's tracer turns ``torch.ones(8, 8).triu(1)`` into a tensor constant (which becomes a
    graph input); capture keeps such a mask in the graph: put its ops back."""
    for node in list(gm.graph.nodes):
        value = getattr(gm, node.target, None) if node.op == "get_attr" else None
        if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
            diagonal = 1 if torch.equal(value, torch.ones_like(value).triu(1)) else 2
            with gm.graph.inserting_before(node):
                ones = gm.graph.call_function(torch.ones, tuple(value.shape), {"dtype": torch.bool})
                mask = gm.graph.call_method("triu", (ones, diagonal))
            node.replace_all_uses_with(mask)
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


def _compile(model, inputs, compiler, capture, table="decomposed", **kwargs):
    with torch.no_grad():
        return aot_compile(
            _mask_in_graph(capture(model)),
            inputs,
            fw_compiler=compiler,
            decompositions=_table(table),
            **kwargs,
        )


def _check_close(out, model, inputs):
    """float32: equal to eager. 16-bit: no further from fp64 than eager is (the project's rule)."""
    with torch.no_grad():
        expected = model(*inputs)
    if out.dtype == torch.float32:
        torch.testing.assert_close(out, expected, equal_nan=True)
        return
    with torch.no_grad():
        reference = model(*[x.double() if x.is_floating_point() else x for x in inputs])

    def rmse(a):
        return (a.double() - reference).pow(2).mean().sqrt().item()

    assert rmse(out) <= 2 * rmse(expected) + 1e-2, (rmse(out), rmse(expected))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mask", ["none", "causal", "triu2", "bool", "add"])
@pytest.mark.parametrize("scale", ["mul", "div", "none"])
@pytest.mark.parametrize("table", ["core", "decomposed"])
def test_attention_becomes_sdpa_and_equals_eager(dtype, mask, scale, table, compiler, capture):
    model = Attention(8, 16, mask=mask, scale=scale)
    compiled = _compile(model, _inputs(mask, dtype), compiler, capture, table)
    gm = compiler.graphs[0]
    assert len(_sdpa_nodes(gm)) == 1, gm.graph
    assert not [n for n in gm.graph.nodes if n.target is aten.bmm.default]
    assert len(gm.meta["attention"].fused) == 1
    for _ in range(2):  # fresh inputs, not the example ones
        inputs = _inputs(mask, dtype)
        _check_close(compiled(*inputs)[0], model, inputs)


@pytest.mark.parametrize("mask", ["causal", "bool"])
def test_a_table_that_decomposes_sdpa_still_equals_eager(mask, compiler, capture):
    model = Attention(8, 16, mask=mask)
    compiled = _compile(model, _inputs(mask, torch.float32), compiler, capture, "raw")
    gm = compiler.graphs[0]
    assert not _sdpa_nodes(gm) and "no attention kernel" in " ".join(gm.meta["attention"].refused)
    inputs = _inputs(mask, torch.float32)
    if mask == "bool":
        inputs[3][0, 0, 2] = True  # a row with every key removed: NaN, as in eager
    _check_close(compiled(*inputs)[0], model, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_keys_and_values_broadcast_over_heads(dtype, compiler, capture):
    """One key/value head shared by every query head (``@`` broadcasts)."""
    model = Attention(8, 16, mask="causal")

    def inputs():
        q, k, v = _inputs("none", dtype)
        return [q, k[:, :1], v[:, :1]]

    compiled = _compile(model, inputs(), compiler, capture)
    # SDPA's CPU kernel takes no broadcast heads: torch picks its math, so the graph is left as
    # written (the rewrite would only add ops)
    gm = compiler.graphs[0]
    assert not _sdpa_nodes(gm) and not gm.meta["attention"].fused
    assert "no attention kernel" in " ".join(gm.meta["attention"].refused)
    fresh = inputs()
    _check_close(compiled(*fresh)[0], model, fresh)


def test_causal_constant_mask_becomes_is_causal(compiler, capture):
    _compile(Attention(8, 16, mask="causal"), _inputs("causal", torch.float32), compiler, capture)
    (line,) = compiler.graphs[0].meta["attention"].fused
    assert "causal" in line
    # no mask tensor is read: the SDPA op takes only q, k, v (is_causal=True)
    (node,) = _sdpa_nodes(compiler.graphs[0])
    assert True in list(node.args) + list(node.kwargs.values())


def test_triu2_is_not_mistaken_for_causal(compiler, capture):
    _compile(Attention(8, 16, mask="triu2"), _inputs("triu2", torch.float32), compiler, capture)
    (line,) = compiler.graphs[0].meta["attention"].fused
    assert "boolean mask" in line


@pytest.mark.parametrize("mask", ["bool", "add"])
def test_fully_masked_rows_are_nan_as_in_eager(mask, compiler, capture):
    model = Attention(8, 16, mask=mask)
    compiled = _compile(model, _inputs(mask, torch.float32), compiler, capture)
    assert _sdpa_nodes(compiler.graphs[0])
    q, k, v, m = _inputs(mask, torch.float32)
    if mask == "bool":
        m = torch.rand(2, 1, 8, 8) < 0.3
        m[0, 0, 3] = True  # row 3 of batch 0: every key removed
    else:
        m = torch.randn(2, 1, 8, 8)
        m[1, 0, 5] = -math.inf
    out = compiled(q, k, v, m)[0]
    with torch.no_grad():
        expected = model(q, k, v, m)
    assert expected.isnan().any()
    torch.testing.assert_close(out, expected, equal_nan=True)


@pytest.mark.parametrize(
    "case", ["softmax_dim", "weights_returned", "finite_fill", "dropout", "3d"]
)
def test_non_matching_patterns_are_left_alone(case, compiler, capture):
    kwargs = {
        "softmax_dim": {"softmax_dim": -2},
        "weights_returned": {"return_weights": True},
        "finite_fill": {"mask": "causal", "fill": -1e9},
        "dropout": {"dropout": 0.5},
        "3d": {},
    }[case]
    model = Attention(8, 16, **kwargs)
    inputs = _inputs(kwargs.get("mask", "none"), torch.float32)
    if case == "3d":
        inputs = [x.flatten(0, 1) for x in inputs]
    compiled = _compile(model, inputs, compiler, capture)
    gm = compiler.graphs[0]
    assert not _sdpa_nodes(gm)
    assert not gm.meta["attention"].fused
    if case == "weights_returned":
        assert "used elsewhere" in " ".join(gm.meta["attention"].refused)
    if case == "dropout":
        return  # random: the point is only that nothing was rewritten
    fresh = _inputs(kwargs.get("mask", "none"), torch.float32)
    if case == "3d":
        fresh = [x.flatten(0, 1) for x in fresh]
    out = compiled(*fresh)
    with torch.no_grad():
        expected = model(*fresh)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(out, expected):
        torch.testing.assert_close(got, want)


def test_option_off_keeps_the_matmuls(compiler, capture):
    _compile(
        Attention(8, 16, mask="causal"),
        _inputs("causal", torch.float32),
        compiler,
        capture,
        sdpa_attention=False,
    )
    assert not _sdpa_nodes(compiler.graphs[0])


def test_training_is_not_rewritten_and_gradients_equal_eager(compiler, capture):
    model = Attention(8, 16, mask="causal")
    inputs = [x.requires_grad_() for x in _inputs("causal", torch.float32)]
    compiled = aot_compile(
        capture(model), inputs, fw_compiler=compiler, decompositions=_table("decomposed")
    )
    assert not _sdpa_nodes(compiler.graphs[0])
    fresh = [x.detach().clone().requires_grad_() for x in _inputs("causal", torch.float32)]
    twin = [x.detach().clone().requires_grad_() for x in fresh]
    compiled(*fresh)[0].square().sum().backward()
    model(*twin).square().sum().backward()
    for a, b in zip(fresh, twin):
        torch.testing.assert_close(a.grad, b.grad)
