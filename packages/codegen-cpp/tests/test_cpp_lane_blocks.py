"""Reductions over rows of a contiguous matrix (``sum(0)``: the r-loop strided, neighbouring x
adjacent) run their innermost x-loop as blocks of lanes (``_lanes.py``): each r iteration's lane
loop is the innermost loop, so g++ vectorizes it, libmvec calls and stores included. Results
against eager on fresh inputs, for several reductions, block remainders, one column, symbolic
sizes and an input mask; the source says which form ran."""

from __future__ import annotations

import pytest
import torch
from torchkiln_codegen_cpp import CppOptions

TOL = {"rtol": 1e-4, "atol": 1e-4}


def gelu_backward_and_bias_grad(g, x):
    d = torch.ops.aten.gelu_backward(g, x)
    return d, d.sum(0)


def statistics_over_rows(x):
    var, mean = torch.var_mean(torch.tanh(x), dim=0, correction=0)
    return mean, var, torch.amax(x.exp(), dim=0), (x * x).mean(0)


def argmax_over_rows(x):
    return torch.argmax(x.sin(), dim=0), torch.amin(x, dim=0)


@pytest.mark.parametrize("cols", [256, 19, 1], ids=["256", "19", "1"])
def test_gelu_backward_with_its_bias_gradient(e2e, cols):
    compiled = e2e.compile(gelu_backward_and_bias_grad)
    for _ in range(2):
        g, x = torch.randn(300, cols), torch.randn(300, cols) * 3
        for out, ref in zip(compiled(g, x), gelu_backward_and_bias_grad(g, x)):
            torch.testing.assert_close(out, ref, **TOL)
    source = e2e.sources(compiled)
    if cols > 1:
        assert "x0_lane" in source and "erf" in source, source


@pytest.mark.parametrize(
    "fn", [statistics_over_rows, argmax_over_rows], ids=["statistics", "argmax"]
)
def test_other_reductions_over_rows(e2e, fn):
    compiled = e2e.compile(fn)
    for rows, cols in ((200, 40), (33, 17)):
        x = torch.randn(rows, cols)
        x[3, 2] = float("nan")  # a NaN in one column: max, argmax and the sums see it
        for out, ref in zip(compiled(x), fn(x)):
            torch.testing.assert_close(out, ref, **TOL, equal_nan=True)
    # argmax keeps its value and index under a branch: the single loop
    assert ("x0_lane" in e2e.sources(compiled)) == (fn is statistics_over_rows)


def test_symbolic_sizes_and_a_column_count_under_one_block(e2e):
    compiled = e2e.compile(gelu_backward_and_bias_grad, dynamic=True)
    for rows, cols in ((64, 48), (7, 5), (129, 33)):
        g, x = torch.randn(rows, cols), torch.randn(rows, cols)
        for out, ref in zip(compiled(g, x), gelu_backward_and_bias_grad(g, x)):
            torch.testing.assert_close(out, ref, **TOL)


def test_masked_loads_keep_the_single_loop(e2e):
    """A ``cat``'s pieces are masked loads, constant along r for each x: the single x-loop
    predicts that branch, so such kernels are not blocked."""

    def fn(a, b):
        c = torch.cat([a.exp(), b * 2], dim=1)
        return c, c.sum(0)

    compiled = e2e.compile(fn)
    a, b = torch.randn(100, 24), torch.randn(100, 40)
    for out, ref in zip(compiled(a, b), fn(a, b)):
        torch.testing.assert_close(out, ref, **TOL)
    assert "x0_lane" not in e2e.sources(compiled)


def test_x_lanes_zero_keeps_the_single_loop(e2e):
    compiled = e2e.compile(gelu_backward_and_bias_grad, cpp_options=CppOptions(x_lanes=0))
    g, x = torch.randn(100, 64), torch.randn(100, 64)
    for out, ref in zip(compiled(g, x), gelu_backward_and_bias_grad(g, x)):
        torch.testing.assert_close(out, ref, **TOL)
    assert "x0_lane" not in e2e.sources(compiled)


def test_lane_blocks_rewrites_the_x_body_or_declines():
    """The x body's declarations become arrays read per lane; a statement it cannot classify
    (another type's declaration, a call) or a branch makes it decline (None: the one x-loop)."""
    from torchkiln_codegen_cpp._lanes import lane_blocks

    def rloop(body):
        return lambda item: (
            ["float acc1 = 0;"],
            ["for (int64_t r0 = 0; r0 < 8LL; r0++) {"],
            body,
            ["}"],
        )

    body = ["float tmp2 = in_ptr0[x0 + 4LL * r0];", "acc1 = acc1 + tmp2 * tmp0;"]
    x_lines = ["float tmp0 = in_ptr1[x0];", object(), "out_ptr2[x0] = acc1;"]
    out = lane_blocks(x_lines, "x0", "4LL", 16, rloop(body))
    text = "\n".join(out)
    assert "float acc1[16];" in text and "float tmp0[16];" in text, text
    assert "acc1[x0_lane] = acc1[x0_lane] + tmp2 * tmp0[x0_lane];" in text, text
    assert "out_ptr2[x0] = acc1[x0_lane];" in text, text
    assert lane_blocks(["foo(x0);", object()], "x0", "4LL", 16, rloop(body)) is None
    assert lane_blocks(["tk_pair<float> p = x0;", object()], "x0", "4LL", 16, rloop(body)) is None
    branchy = ["if (tmp0) {", "acc1 = acc1 + 1;", "}"]
    assert lane_blocks(["float tmp0 = 1;", object()], "x0", "4LL", 16, rloop(branchy)) is None
