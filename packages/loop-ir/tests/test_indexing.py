"""Indirect indexing lowerings and fallbacks against eager."""

from __future__ import annotations

import torch


def test_embedding_gather_index_select(check):
    w = torch.randn(11, 5)
    idx = torch.randint(0, 11, (3, 4))
    x = torch.randn(6, 7)
    g = torch.randint(0, 7, (6, 3))
    check(
        lambda w, idx, x, g: (
            torch.nn.functional.embedding(idx, w),
            torch.gather(x, 1, g),
            torch.index_select(x, 1, g[0]),
            x[g[:, 0] % 6],
            x[:, g[0]],
        ),
        w,
        idx,
        x,
        g,
    )


def test_negative_indices_wrap(check):
    x = torch.randn(8, 3)
    i = torch.tensor([-1, 0, -8, 5])
    check(lambda x, i: (x[i] * 2,), x, i)


def test_scatter_add_and_index_put_are_lowered(check):
    x = torch.randn(5, 4)
    idx = torch.randint(0, 5, (7, 4))  # duplicates: accumulation must add them all
    src = torch.randn(7, 4)
    rows = torch.randint(-5, 5, (6,))
    vals = torch.randn(6, 4)
    cg = check(
        lambda x, i, s, r, v: (
            x.scatter_add(0, i, s) * 2,
            torch.index_put(x, (r,), v, accumulate=True),
            x.scatter(1, i[:5, :1] % 4, 3.0),
        ),
        x,
        idx,
        src,
        rows,
        vals,
        atol=1e-5,
        rtol=1e-5,
    )
    assert cg.fallbacks == []


def test_scatter_without_accumulation_is_lowered(check):
    # plain scatter overwrites; eager leaves the winner of duplicate indices undefined, so the
    # indices are unique down each column here (where the result is defined)
    x = torch.zeros(5, 4)
    idx = torch.tensor([[0, 1, 2, 3], [4, 3, 1, 0]])
    src = torch.randn(2, 4)
    cg = check(
        lambda x, i, s: (
            x.scatter(0, i, s) + 1,
            x.scatter(1, i[:, :2] % 4, 7.0),
            torch.index_put(x, (i[0],), s[1] * 2),
        ),
        x,
        idx,
        src,
    )
    assert cg.fallbacks == []


def test_scatter_forms_that_still_fall_back(check):
    x, idx, src = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3], [4, 3, 1, 0]]), torch.randn(2, 4)
    cg = check(
        lambda x, i, s: (
            x.scatter_reduce(0, i, s, "amax"),
            x.half().scatter_add(0, i, s.half()).float(),
        ),
        x,
        idx,
        src,
        atol=1e-3,
        rtol=1e-3,
    )
    # the float16 scatter_add adds into a float32 copy (loop-ir 0.8.35): lowered
    assert sorted(cg.fallbacks) == ["aten.scatter_reduce.two"]


def test_layout_index_is_remembered_per_arguments_and_their_types():
    # FixedLayout.index keeps its sums (the loaders run it again in every analysis): equal
    # arguments give the very same answer, other strides or offsets their own, and an int index
    # is not answered with the sum built for a sympy Integer (they hash alike)
    import sympy
    import torch
    from torchkiln_loop_ir.ir import FixedLayout

    x0, x1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)
    a = FixedLayout(
        torch.device("cpu"),
        torch.float32,
        (sympy.Integer(4), sympy.Integer(5)),
        (sympy.Integer(5), sympy.Integer(1)),
    )
    b = FixedLayout(
        torch.device("cpu"),
        torch.float32,
        [sympy.Integer(4), sympy.Integer(5)],
        [sympy.Integer(1), sympy.Integer(4)],
        sympy.Integer(3),
    )
    for _ in range(2):
        assert a.index([x0, x1]) == 5 * x0 + x1
        assert b.index([x0, x1]) == x0 + 4 * x1 + 3
        assert a.index([x1, x0]) == 5 * x1 + x0
    plain = FixedLayout(torch.device("cpu"), torch.float32, (4, 5), (5, 1), 0)
    assert type(plain.index((sympy.Integer(1), sympy.Integer(2)))) is sympy.Integer
    got = plain.index((1, 2))
    assert got == 7 and type(got) is int


def test_scatter_of_one_element_per_row_is_a_fused_select(check):
    """scatter with one index per row (cross-entropy's one-hot gradient) lowers to a Pointwise
    select: no copy of the target realized, no Scatter node, and the consumer (the product and
    the row sum) is one kernel with it. Values, a source tensor and a random target."""
    x = torch.randn(6, 9)
    t = torch.randint(0, 9, (6, 1))
    s = torch.randn(6, 4)
    cg = check(
        lambda x, t, s: (
            (torch.zeros_like(x).scatter(1, t, -1.0) * x).sum(1),
            x.scatter(1, t, s[:, :1]) * 2,
            x.t().scatter(0, t.t(), 5.0) + 1,
        ),
        x,
        t,
        s,
    )
    assert not any(type(n.data).__name__ == "Scatter" for n in cg.graph_ir.nodes)


def test_cross_entropy_backward_writes_no_one_hot(check):
    logits = torch.randn(8, 50, requires_grad=True)
    target = torch.randint(0, 50, (8,))
    target[3] = -100  # ignored

    def f(logits, target):
        loss = torch.nn.functional.cross_entropy(logits, target)
        (grad,) = torch.autograd.grad(loss, logits)
        return loss, grad

    cg = check(f, logits, target)
    assert not any(type(n.data).__name__ == "Scatter" for n in cg.graph_ir.nodes)


def test_contiguous_along_names_the_innermost_dim_an_access_walks():
    """The one rule behind the Triton block layout, the column-reduction split and the fusion
    planner's row/column check: along x or r, x first, a broadcast left out when asked."""
    from torchkiln_loop_ir.indexing import FloorDiv, contiguous_along, index_symbol

    x, r = index_symbol("x", 0), index_symbol("r", 0)
    assert contiguous_along(x + 64 * r, x, r) == "x"  # a column of a [R, 64] tensor
    assert contiguous_along(r + 4096 * x, x, r) == "r"  # a row of a [X, 4096] tensor
    assert contiguous_along(x + r, x, r) == "x"  # both: x first
    assert contiguous_along(3 * x + 5 * r, x, r) is None  # strided both ways
    assert contiguous_along(x, x, r) is None  # does not vary along r
    # a row's mean at every r (step 0 along r at the block's start): counted, or left out
    mean = x + 0 * r + FloorDiv(r, 1 << 20)
    assert contiguous_along(mean, x, r) == "x"
    assert contiguous_along(mean, x, r, broadcasts=False) is None
