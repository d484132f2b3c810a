"""Ops the real models needed: max_pool2d_with_indices, rounding casts through 16-bit floats."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx


@pytest.mark.parametrize("args", [(2,), (3, 2, 1), ((2, 3), (1, 2), (1, 0))])
def test_max_pool2d_with_indices(check, args):
    def f(x):
        v, i = torch.nn.functional.max_pool2d(x, *args, return_indices=True)
        return v * 2, i

    cg = check(f, torch.randn(2, 3, 9, 8))
    assert cg.fallbacks == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_explicit_casts_round_through_16_bit(check, dtype):
    def f(x):
        y = x.to(dtype) * 3
        return (y.to(torch.float32) + 1, y.to(torch.int64), (x.to(dtype) + 1).to(torch.float64))

    check(f, torch.randn(1000) * 100, atol=0, rtol=0)


def _random_graph():
    def f(x):
        return (
            torch.nn.functional.dropout(x, 0.3, True),
            torch.rand_like(x),
            torch.randn(300, 40) + 1,
            torch.bernoulli(x.sigmoid()),
        )

    x = torch.randn(300, 40)
    gm = make_fx(
        torch.func.functionalize(f, remove="mutations_and_views"),
        decomposition_table=L.decompositions(),
    )(x)
    return gm, x


def test_random_ops_from_per_call_seeds():
    gm, x = _random_graph()
    cg = L.compile_graph(gm, [x], L.ReferenceBackend())
    assert cg.fallbacks == [] and cg.extern_calls == ["aten.randint.low"]
    d, r, n, b = cg(x)
    kept = d != 0
    assert abs(1 - kept.float().mean().item() - 0.3) < 0.03  # dropout keeps 1 - p
    torch.testing.assert_close(d[kept], x[kept] / 0.7)  # kept values are scaled by 1 / (1 - p)
    assert 0 <= r.min() and r.max() < 1 and abs(r.mean().item() - 0.5) < 0.02
    assert abs(n.mean().item() - 1) < 0.03 and abs(n.std().item() - 1) < 0.03
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs((b - x.sigmoid()).mean().item()) < 0.02
    assert not torch.equal(cg(x)[1], r)  # fresh seeds on every call
    torch.manual_seed(3)
    first = cg(x)
    torch.manual_seed(3)
    for a, c in zip(first, cg(x)):  # the seeds come from torch's generator
        assert torch.equal(a, c)


@pytest.mark.parametrize("backend", ["reference", "cpp"])
@pytest.mark.parametrize("args", [(2,), (3, 2, 1), ((2, 3), (1, 2), (1, 0)), (3, 1, 1, 1, True)])
def test_max_pool2d_indices_of_ties_nans_and_signed_zeros(check, backend, args):
    """The index is where eager's walk (``v > best or isnan(v)``) ends, worked out from the
    maximum (``lowering/pooling.py``): the first tap equal to it, or the last NaN. Windows full
    of ties (values from a few integers), several NaNs, -0.0 beside 0.0, -inf, padding."""
    from torchkiln_codegen_cpp import CppBackend

    def f(x):
        return torch.nn.functional.max_pool2d(x, *args, return_indices=True)

    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-2, 2, (2, 3, 9, 8), generator=g).float()
        x[x == 0] = torch.where(torch.rand(int((x == 0).sum()), generator=g) < 0.5, -0.0, 0.0)
        x.view(-1)[torch.randperm(x.numel(), generator=g)[:20]] = float("nan")
        x.view(-1)[torch.randperm(x.numel(), generator=g)[:10]] = float("-inf")
        cg = check(
            f,
            x,
            atol=0,
            rtol=0,
            equal_nan=True,
            backend=CppBackend() if backend == "cpp" else None,
        )
        assert cg.fallbacks == []


@pytest.mark.parametrize("backend", ["reference", "cpp", "triton"])
@pytest.mark.parametrize(
    "args, shapes",
    [
        ((3, 2, 1), [(2, 3, 9, 8)]),
        (((2, 3), 1, (1, 1), 1, True), [(2, 3, 9, 8)]),
        ((2, 1, 1, 2, True), [(2, 3, 9, 8), (7, 7, 1)]),
        ((3, 2, 1, 2), [(2, 3, 9, 8)]),
    ],
    ids=["pad", "uneven-ceil", "dilated-empty-windows", "dilated"],
)
def test_max_pool2d_index_where_the_window_starts_in_padding(check, backend, args, shapes):
    """Eager's walk starts at the window's first tap inside the input (its start stepped by the
    dilation until it is not negative) from -inf, and moves only for a value above the best or
    a NaN: where every value inside is -inf, or (dilated, over a plane one wide) no tap is
    inside at all, the index is that start, never a padding tap's (fuzz seed 99 of
    ``pool_share``: a negative index, then a wrong gradient)."""
    from torchkiln_codegen_cpp import CppBackend
    from torchkiln_codegen_triton import TritonBackend

    made = {"reference": L.ReferenceBackend, "cpp": CppBackend, "triton": TritonBackend}[backend]

    def f(x):
        return torch.nn.functional.max_pool2d(x, *args, return_indices=True)

    for shape in shapes:
        g = torch.Generator().manual_seed(len(shape))
        x = torch.randn(shape, generator=g)
        x[..., :4, :3] = float("-inf")  # windows whose inside values are all -inf
        x.view(-1)[torch.randperm(x.numel(), generator=g)[:4]] = float("nan")
        cg = check(f, x, atol=0, rtol=0, equal_nan=True, backend=made())
        assert cg.fallbacks == []


@pytest.mark.parametrize("backend", ["reference", "cpp", "triton"])
@pytest.mark.parametrize(
    "args",
    [(3, 2, 1), (2, 1, 1, 2, True), (3, 2, 1, 2), (2, 2, 0)],
    ids=["pad", "uneven-ceil", "dilated", "no-pad"],
)
def test_max_pool2d_walked_index_on_the_cpu(check, backend, args, monkeypatch):
    """The GPU's form of max pooling's index (eager's walk, one select per tap), run on the
    CPU, where CI runs: the values and the indices (int64, what the backward reads) equal
    eager's, NaNs and all -inf windows included."""
    from torchkiln_codegen_cpp import CppBackend
    from torchkiln_codegen_triton import TritonBackend
    from torchkiln_loop_ir.lowering import pooling

    monkeypatch.setattr(pooling, "walks_the_window", lambda device: True)
    made = {"reference": L.ReferenceBackend, "cpp": CppBackend, "triton": TritonBackend}[backend]

    def f(x):
        return torch.nn.functional.max_pool2d(x, *args, return_indices=True)

    for shape in [(2, 3, 9, 8), (3, 7, 6)]:
        g = torch.Generator().manual_seed(len(shape))
        x = torch.randn(shape, generator=g)
        x[..., :4, :3] = float("-inf")
        x.view(-1)[torch.randperm(x.numel(), generator=g)[:4]] = float("nan")
        cg = check(f, x, atol=0, rtol=0, equal_nan=True, backend=made())
        assert cg.fallbacks == []
        assert cg(x)[1].dtype == torch.int64
