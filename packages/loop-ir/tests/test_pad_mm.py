"""Matrix multiplies padded to aligned sizes (pad_mm.py): equal to eager on fresh random inputs
for mm, addmm (1-D and 2-D bias) and bmm with unaligned M, K or N, with the product read by
fused pointwise code, by views and as a graph output (which keeps its traced strides); each
decision in the log. The pass is for CUDA's kernels; ``pad_matmuls="always"`` runs it here."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as L
from torchkiln_loop_ir import pad_mm

ALWAYS = L.LoopIROptions(pad_matmuls="always")


@pytest.fixture(autouse=True)
def _small_products(monkeypatch):
    monkeypatch.setattr(pad_mm, "MIN_WORK", 0)  # the test products are small
    monkeypatch.setattr(pad_mm, "MAX_GROWTH", 2.0)


def _padded(cg) -> list[str]:
    return [line for line in cg.linear_log if "padded to" in line]


@pytest.mark.parametrize("m,k,n", [(64, 96, 101), (61, 96, 128), (64, 95, 128), (33, 45, 50)])
def test_mm_unaligned_sizes(check, m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    cg = check(lambda a, b: torch.mm(a, b), a, b, atol=1e-4, rtol=1e-4, options=ALWAYS)
    assert len(_padded(cg)) == 1, cg.linear_log
    out = cg(a, b)[0]
    assert out.stride() == (n, 1)  # a graph output keeps the strides it was traced with


def test_linear_with_bias_read_by_pointwise_and_views(check):
    x, w, bias = torch.randn(4, 16, 96), torch.randn(101, 96), torch.randn(101)

    def f(x, w, bias):
        y = torch.nn.functional.linear(x, w, bias)  # addmm of a transposed weight
        return torch.relu(y) * 2, y.sum(-1)

    cg = check(f, x, w, bias, atol=1e-4, rtol=1e-4, options=ALWAYS)
    assert _padded(cg), cg.linear_log


def test_addmm_2d_bias_unaligned_m_and_n(check):
    bias, a, b = torch.randn(63, 101), torch.randn(63, 96), torch.randn(96, 101)
    cg = check(
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        bias,
        a,
        b,
        atol=1e-4,
        rtol=1e-4,
        options=ALWAYS,
    )
    assert _padded(cg), cg.linear_log


def test_bmm_and_gradient_shaped_products(check):
    a, b = torch.randn(3, 33, 45), torch.randn(3, 45, 50)
    cg = check(lambda a, b: torch.bmm(a, b) + 1, a, b, atol=1e-4, rtol=1e-4, options=ALWAYS)
    assert _padded(cg)
    # a backward's weight gradient: the transposed unaligned operand is the left one
    g, h = torch.randn(64, 101), torch.randn(64, 96)
    cg = check(
        lambda g, h: (g.t() @ h, g @ torch.ones(101, 96)),
        g,
        h,
        atol=1e-4,
        rtol=1e-4,
        options=ALWAYS,
    )
    assert len(_padded(cg)) == 2, cg.linear_log


def test_bfloat16_aligns_to_eight_elements(check):
    a, b = torch.randn(64, 96).bfloat16(), torch.randn(96, 100).bfloat16()
    cg = check(lambda a, b: a @ b, a, b, atol=1e-2, rtol=1e-2, options=ALWAYS)
    assert [line for line in _padded(cg) if "64x96x100 padded to 64x96x104" in line]


def test_aligned_small_and_off(check, monkeypatch):
    a, b = torch.randn(64, 96), torch.randn(96, 128)
    assert not _padded(check(lambda a, b: a @ b, a, b, atol=1e-4, rtol=1e-4, options=ALWAYS))
    monkeypatch.setattr(pad_mm, "MIN_WORK", 1 << 24)
    cg = check(lambda a, b: a @ b, torch.randn(8, 9), torch.randn(9, 7), atol=1e-4, options=ALWAYS)
    assert not _padded(cg) and any("too small" in line for line in cg.linear_log)
    # the default is CUDA only
    cg = check(lambda a, b: a @ b, torch.randn(8, 9), torch.randn(9, 7), atol=1e-4)
    assert not _padded(cg)


def test_float32_products_are_left_alone_without_tf32(trace):
    """Without TF32 a float32 product runs on the SIMT cores, which alignment does not speed up
    (gpu_mm_layouts.py --dtype float32): ``float32=False`` leaves it as traced, with its reason
    in the log, and still pads a bfloat16 product of the same graph."""
    a, b = torch.randn(64, 96), torch.randn(96, 101)
    c, d = torch.randn(64, 96).bfloat16(), torch.randn(96, 100).bfloat16()

    def f(a, b, c, d):
        return a @ b, c @ d

    new, log = pad_mm.pad_matmuls(trace(f, a, b, c, d), float32=False)
    assert any("float32 without TF32" in line for line in log), log
    assert [line for line in log if "64x96x100 padded to 64x96x104" in line], log
    pads = [n for n in new.graph.nodes if n.target is torch.ops.aten.constant_pad_nd.default]
    assert len(pads) == 1, new.graph  # the bfloat16 product's B; the float32 one reads its own
    a, b = torch.randn(64, 96), torch.randn(96, 101)
    c, d = torch.randn(64, 96).bfloat16(), torch.randn(96, 100).bfloat16()
    first, second = new(a, b, c, d)
    torch.testing.assert_close(first, a @ b)
    torch.testing.assert_close(second, c @ d, atol=1e-2, rtol=1e-2)
    # with it (TF32's setting), the float32 product is padded as well
    _new, log = pad_mm.pad_matmuls(trace(f, a, b, c, d))
    assert sum("padded to" in line for line in log) == 2, log


def test_bad_option_is_a_clear_error():
    with pytest.raises(ValueError, match="pad_matmuls"):
        L.LoopIROptions(pad_matmuls="sometimes")


def test_free_outputs_keep_the_padded_layout(trace):
    a, b = torch.randn(64, 96), torch.randn(96, 101)
    gm = trace(lambda a, b: (a @ b, (a @ b).relu()), a, b)
    gm.meta["free_output_strides"] = 1  # contract C2: the first output goes to the user as it is
    cg = L.compile_graph(gm, [a, b], L.ReferenceBackend(), ALWAYS)
    first, second = cg(a, b)
    torch.testing.assert_close(first, a @ b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(second, (a @ b).relu(), atol=1e-4, rtol=1e-4)
    assert first.stride() == (104, 1) and second.stride() == (101, 1)


def test_transposed_operands_pad_their_base_once(trace, check):
    """A linear layer's two gradients and its forward read g, g.t(), w and w.t(): one padded
    copy of g and one of w, each written in its own (base) order, serve all three products."""
    g, h, w = torch.randn(64, 101), torch.randn(64, 96), torch.randn(101, 96)

    def f(g, h, w):
        return g.t() @ h, g @ w, h @ w.t()

    new, log = pad_mm.pad_matmuls(trace(f, g, h, w))
    pads = [n for n in new.graph.nodes if n.target is torch.ops.aten.constant_pad_nd.default]
    assert len(pads) == 2 and all(p.args[0].op == "placeholder" for p in pads), new.graph
    assert sum("padded to" in line for line in log) == 3
    check(f, g, h, w, atol=1e-4, rtol=1e-4, options=ALWAYS)


def _fake_trace(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, decomposition_table=L.decompositions(), tracing_mode="fake")(*inputs)


def test_one_fake_mode_graph_skips_the_full_propagation(monkeypatch):
    """A graph whose values are all fake tensors of one mode (make_fx's fake tracing, as
    aot-partition's graphs) is padded in that mode without re-propagating it whole: the same
    graph, the same sizes and strides on every node, as the full propagation gives, and equal
    to eager when compiled."""
    from torchkiln_loop_ir import mkldnn

    g, h, w = torch.randn(64, 101), torch.randn(64, 96), torch.randn(101, 96)

    def f(g, h, w):
        y = g @ w
        return g.t() @ h, y.relu() * 2, y.view(8, 8, 96)[:, 1], h @ w.t()

    gm = _fake_trace(f, g, h, w)
    assert mkldnn._one_fake_mode(gm.graph) is not None
    full_runs = []
    real_propagate = mkldnn._propagate_meta

    def counting(graph, mode, since=None):
        full_runs.append(since is None)
        return real_propagate(graph, mode, since)

    monkeypatch.setattr(pad_mm, "_propagate_meta", counting)
    monkeypatch.setattr(mkldnn, "_propagate_meta", counting)
    fast, fast_log = pad_mm.pad_matmuls(gm)
    assert full_runs == [False]  # only the incremental propagation after the rewrite
    monkeypatch.setattr(mkldnn, "_one_fake_mode", lambda graph: None)
    full, full_log = pad_mm.pad_matmuls(gm)
    assert full_runs == [False, True, False]
    assert fast_log == full_log and sum("padded to" in line for line in fast_log) == 3
    assert fast.code == full.code
    for a, b in zip(fast.graph.nodes, full.graph.nodes):
        assert mkldnn._same_meta(a.meta.get("val"), b.meta.get("val")), (a, a.meta, b.meta)
    expected = f(g, h, w)
    for padded in (fast, full):
        got = L.compile_graph(padded, [g, h, w], L.ReferenceBackend())(g, h, w)
        for x, e in zip(got, expected):
            torch.testing.assert_close(x, e, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [101, 3, 104, 9])
@pytest.mark.parametrize("bias", [None, "row", "matrix", "column", "one row", "scalar"])
def test_padded_output_product_splits_at_the_aligned_columns(dtype, n, bias):
    """``torchkiln::mm_padded_n`` runs the aligned columns (N rounded down to 16 bytes' worth)
    and the rest as two products into one padded output: equal to ``addmm`` for every bias
    shape, with no aligned part (N = 3), no remainder (N = 104) and one column over (N = 9)."""
    m, k = 24, 16
    a, w = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    shapes = {"row": (n,), "matrix": (m, n), "column": (m, 1), "one row": (1, n), "scalar": ()}
    c = None if bias is None else torch.randn(shapes[bias], dtype=dtype)
    padded_n = n + 8 - n % 8
    out = pad_mm._mm_padded_n(c, a, w.t(), padded_n)
    assert out.shape == (m, padded_n)
    expected = a @ w.t() if c is None else torch.addmm(c, a, w.t())
    torch.testing.assert_close(out[:, :n], expected)


def test_outputs_only_by_default_for_products_without_a_bias(check):
    """The default ("auto") writes a bias-free product whose weight rows are aligned into a
    padded output (no padded copy of the weight) and pads an ``addmm``'s operands (ATen would
    copy its bias into the strided output first); True writes both; False neither. Each way
    equal to eager."""
    h, w, bias = torch.randn(64, 96), torch.randn(101, 96), torch.randn(101)

    def f(h, w, bias):
        return h @ w.t(), torch.addmm(bias, h, w.t()).relu()

    for mode, written in (("auto", 1), (True, 2), (False, 0)):
        options = L.LoopIROptions(pad_matmuls="always", pad_matmul_outputs_only=mode)
        cg = check(f, h, w, bias, atol=1e-4, rtol=1e-4, options=options)
        log = cg.linear_log
        assert sum("written into an output padded" in line for line in log) == written, log
        assert sum("padded to" in line for line in log) == 2, log


def test_bad_outputs_only_option_is_a_clear_error():
    with pytest.raises(ValueError, match="pad_matmul_outputs_only"):
        L.LoopIROptions(pad_matmul_outputs_only="sometimes")
