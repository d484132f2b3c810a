"""C++ kernels of the shapes that made the zoo's unet slow (issue 17): cat and padding masks on
the innermost index split into one vectorized loop per piece (codegen-cpp's _splits.py),
checked against eager on fresh random inputs with odd sizes, non-contiguous inputs and tails
that do not fill a vector."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

loop_ir = pytest.importorskip("torchkiln_loop_ir")
codegen_cpp = pytest.importorskip("torchkiln_codegen_cpp")

pytestmark = pytest.mark.usefixtures("private_cache_dir")  # tests/conftest.py


def _check(fn, make_inputs, rtol=1e-5, atol=1e-5):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*make_inputs())
    cg = loop_ir.compile_graph(gm, list(make_inputs()), codegen_cpp.CppBackend())
    for _ in range(3):  # fresh inputs each call
        inputs = make_inputs()
        got, want = cg(*inputs), fn(*inputs)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
    return "\n".join(k.source for k in cg.kernels)


def _pieces(source: str, var: str) -> list[tuple[int, int]]:
    """The [start, end) of every constant-bounded loop over ``var`` in ``source``."""
    return [
        (int(a), int(b))
        for a, b in re.findall(
            rf"for \(int64_t {var} = (\d+)LL; {var} < (\d+)LL; {var}\+\+\)", source
        )
    ]


def test_cat_last_dim_splits_at_each_input():
    def f(a, b, c):
        return torch.cat([a.relu(), b * 2, c], dim=-1) + 1

    def inputs():
        return (torch.randn(3, 5, 7), torch.randn(3, 13, 5).transpose(1, 2), torch.randn(3, 5, 3))

    source = _check(f, inputs)
    assert _pieces(source, "x2") == [(0, 7), (7, 20), (20, 23)]


def test_constant_pad_splits_at_the_padding():
    def f(x):
        return F.pad(x.sigmoid(), (2, 3), value=-1.5)

    def inputs():
        return (torch.randn(4, 9, 11)[:, ::2],)

    source = _check(f, inputs)
    assert _pieces(source, "x2") == [(0, 2), (2, 13), (13, 16)]


def test_channels_last_upsample_cat_as_in_unet():
    def f(y, skip):
        y = F.hardswish(F.interpolate(y, scale_factor=2.0, mode="nearest"))
        return torch.cat([y, skip], dim=1).contiguous(memory_format=torch.channels_last)

    def inputs():
        y = torch.randn(2, 19, 5, 7).contiguous(memory_format=torch.channels_last)
        skip = torch.randn(2, 6, 10, 14).contiguous(memory_format=torch.channels_last)
        return y, skip

    source = _check(f, inputs)
    assert _pieces(source, "x3") == [(0, 19), (19, 25)]


def test_cat_with_a_broadcast_and_an_integer_input():
    def f(a, b):
        return torch.cat([a, b.expand(6, 4)], dim=1).to(torch.float32) * 0.5

    def inputs():
        return torch.randint(-9, 9, (6, 17)), torch.randint(-9, 9, (1, 4))

    source = _check(f, inputs)
    assert _pieces(source, "x1") == [(0, 17), (17, 21)]


def test_no_split_without_constant_masks():
    # an index compared with a loaded value (data-dependent) or nothing at all stays one loop
    def f(x, t):
        idx = torch.arange(x.shape[-1])
        return torch.where(idx < t, x, -x)

    def inputs():
        return torch.randn(5, 33), torch.randint(0, 33, (5, 1))

    source = _check(f, inputs)
    assert _pieces(source, "x1") == []


def test_zero_dim_and_one_dim_kernels():
    # no x-loop at all (a 0-d result) and a single loop over a cat: nothing to split / one loop
    def f(a, b):
        return (a * 2).sum() + 1, torch.cat([a, b]).exp(), a[0] * b[1]

    def inputs():
        return torch.randn(19), torch.randn(6)

    source = _check(f, inputs)
    assert _pieces(source, "x0") == [(0, 19), (19, 25)]


def test_masked_softmax_and_exp_at_the_underflow_edge():
    # where(mask, -inf, x) before exp: a bit blend (tk_where) keeps the loop vectorized, and
    # tk_exp answers the lanes that underflow; both must give eager's bits for every value
    def f(x, edge):
        n = x.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)
        att = torch.softmax((x * 0.25).masked_fill(causal, float("-inf")), -1)
        return att, torch.exp(edge), torch.sigmoid(-edge), torch.where(edge > 0, edge, -0.0).exp()

    edge = torch.tensor(
        [
            -103.97,
            -103.98,
            -104.0,
            -104.01,
            -1e30,
            float("-inf"),
            float("inf"),
            float("nan"),
            -0.0,
            0.0,
            88.7,
            88.8,
            -87.4,
            -100.0,
            1e-45,
            -1e-45,
            3.0,
        ]
    )

    def inputs():
        return torch.randn(2, 3, 33, 33), edge[torch.randperm(len(edge))]

    source = _check(f, inputs, rtol=1e-6, atol=0)
    assert "tk_where(" in source and "tk_exp(" in source
    x = torch.randn(1, 1, 33, 33)
    gm = make_fx(f, decomposition_table=loop_ir.decompositions())(x, edge)
    cg = loop_ir.compile_graph(gm, [x, edge], codegen_cpp.CppBackend())
    for got, want in zip(cg(x, edge)[1:], f(x, edge)[1:]):
        torch.testing.assert_close(got, want, rtol=2e-7, atol=0, equal_nan=True)
        assert torch.equal(got == 0, want == 0)  # underflow to 0 exactly where eager's does


# ---- embedding + LayerNorm (hf bert's first kernel) and exact GELU ----------------------------


def _embed_layer_norm(h, vocab=97, n_pos=41):
    """bert's embeddings: three gathered rows summed, then LayerNorm; weights fixed per test."""
    word, pos, kind = torch.randn(vocab, h) * 3 + 5, torch.randn(n_pos, h), torch.randn(2, h)
    w, b = torch.randn(h), torch.randn(h)

    def f(ids, types, positions):
        e = F.embedding(ids, word) + F.embedding(types, kind) + F.embedding(positions, pos)
        return (F.layer_norm(e, (h,), w, b, 1e-12),)

    return f, (word, pos, kind, w, b)


def _r_loop_of(source: str) -> str:
    """The text of the first reduction loop (from its pragma to the first closing brace)."""
    start = source.index("#pragma omp simd reduction")
    return source[start : source.index("}", start)]


def test_embedding_layer_norm_hoists_the_row_index_out_of_the_reduction():
    # The gathered row's index and its bounds check are the same for every element of the row:
    # computed once before the r-loop, which then vectorizes (inside, the check's possible status
    # write kept it scalar: 3.4x slower than eager on bert's embeddings).
    h, seq = 37, 19
    f, _ = _embed_layer_norm(h)

    def inputs():
        return (
            torch.randint(0, 97, (3, seq)),
            torch.randint(0, 2, (3, seq)),
            torch.randint(0, 41, (3, seq)),
        )

    source = _check(f, inputs, rtol=1e-5, atol=2e-5)
    loop = _r_loop_of(source)
    assert "tk_check_index" not in loop and "in_ptr" in loop
    assert source.count("tk_check_index") >= 3


def test_hoisted_index_check_still_raises_for_its_own_call():
    f, _ = _embed_layer_norm(16)
    ok = (
        torch.randint(0, 97, (2, 5)),
        torch.zeros(2, 5, dtype=torch.long),
        torch.randint(0, 41, (2, 5)),
    )
    gm = make_fx(f, decomposition_table=loop_ir.decompositions())(*ok)
    cg = loop_ir.compile_graph(gm, list(ok), codegen_cpp.CppBackend())
    bad = (ok[0].clone(), ok[1], ok[2])
    bad[0][1, 3] = 97  # one past the vocabulary: eager raises IndexError too
    with pytest.raises(IndexError):
        F.embedding(bad[0], torch.randn(97, 16))
    with pytest.raises(IndexError):
        cg(*bad)
    torch.testing.assert_close(cg(*ok)[0], f(*ok)[0], rtol=1e-5, atol=2e-5)  # a later call is clean


def test_masked_gather_in_a_reduction_is_not_hoisted():
    # an index read under a mask (a padded row) must stay under the mask that guards it
    def f(x, idx):
        rows = F.pad(x, (0, 0, 0, 1))[idx.clamp(max=x.shape[0])]  # may select the padding row
        return (rows.sum(-1), F.layer_norm(rows, (x.shape[-1],)))

    def inputs():
        return torch.randn(7, 29), torch.randint(0, 9, (11,))

    source = _check(f, inputs, rtol=1e-5, atol=2e-5)
    # the row index (wrapped, clamped, checked) goes before the loop; the row's load stays
    # under the mask inside it
    loop = _r_loop_of(source)
    assert "tk_check_index" not in loop
    assert re.search(r"if \(tmp\d+\) \{\s+float tmp\d+ = in_ptr\d\[\(r0 \+", loop)


@pytest.mark.parametrize("scale, shift", [(1.0, 0.0), (1.0, 1000.0), (1e4, 0.0), (1e-3, 3.0)])
def test_layer_norm_is_as_close_to_fp64_as_eager(scale, shift):
    # large means against the spread (1000 + randn) and large magnitudes: the variance must be
    # as accurate as eager's float32 layer_norm, measured against a float64 reference
    h = 301  # odd: the vector loop has a tail
    w, b = torch.randn(h), torch.randn(h)

    def f(x):
        return (F.layer_norm(x, (h,), w, b),)

    x = torch.randn(13, h) * scale + shift
    gm = make_fx(f, decomposition_table=loop_ir.decompositions())(x)
    cg = loop_ir.compile_graph(gm, [x], codegen_cpp.CppBackend())
    for _ in range(3):
        x = torch.randn(13, h) * scale + shift
        ref = F.layer_norm(x.double(), (h,), w.double(), b.double())
        got_err = (cg(x)[0].double() - ref).abs().max().item()
        eager_err = (f(x)[0].double() - ref).abs().max().item()
        assert got_err <= 2 * eager_err + 1e-6, (got_err, eager_err)


def test_exact_gelu_across_erf_range():
    # erf through libmvec (or libm) in an omp simd loop: eager's GELU on erf's whole range
    # (saturation near +-4, large magnitudes, zeros, subnormals) at an odd size with a vector tail
    def f(x):
        return (F.gelu(x), F.gelu(x * 3 - 1) * 2)

    def inputs():
        x = torch.cat(
            [
                torch.randn(1000) * 3,
                torch.empty(1000).uniform_(-100, 100),
                torch.tensor([0.0, -0.0, 1e-45, -1e-45, 3.9, -3.9, 1e30, -1e30, 0.5]),
            ]
        )
        return (x[torch.randperm(len(x))].reshape(7, 287),)

    # 1 + erf(x) cancels in the left tail, eager's formula as well: absolute error up to about
    # |x| * eps / 2 there (3e-6 at x = -100), both ways
    source = _check(f, inputs, rtol=2e-6, atol=1e-5)
    assert "#pragma omp simd" in source and "erf(" in source


def test_exact_gelu_special_values_match_fp64():
    # NaN and the infinities, against the float64 formula x/2 * (1 + erf(x/sqrt 2)). Eager's
    # float32 CPU kernel gives NaN for +inf (its vector path); the formula, and we, give +inf.
    special = torch.tensor(
        [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 4.0, -4.0, 10.0, -10.0, 1e30, -1e30]
        * 3
    )

    def f(x):
        return (F.gelu(x),)

    x = special[torch.randperm(len(special))]
    gm = make_fx(f, decomposition_table=loop_ir.decompositions())(x)
    cg = loop_ir.compile_graph(gm, [x], codegen_cpp.CppBackend())
    got = cg(x)[0]
    ref = (x.double() * 0.5 * (1 + torch.erf(x.double() / 2**0.5))).float()
    ref[x == float("-inf")] = float("nan")  # -inf * 0 in the formula, also eager's answer
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6, equal_nan=True)  # tail: see above
    finite = x.isfinite()
    torch.testing.assert_close(got[finite], F.gelu(x)[finite], rtol=1e-6, atol=1e-6)
    assert torch.isnan(got[x.isnan()]).all() and torch.isnan(F.gelu(x)[x.isnan()]).all()
