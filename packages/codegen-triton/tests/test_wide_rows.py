"""Softmax, layer norm, add + layer norm, row and column sums over rows of 1000-8192 (the sizes
where the reduction heuristic turns persistent, and past it), through loop-ir's compile_graph and
this backend (CPU tensors under Triton's interpreter), against eager on fresh random inputs in
float32, bfloat16 and float16, with odd sizes and strided inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend

loop_ir = pytest.importorskip("torchkiln_loop_ir")

ROWS = 3  # rows per tensor: enough for several programs and a partial x block
TOL = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
}


def _softmax(x):
    return torch.softmax(x, -1)


def _layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def _add_layer_norm(x, r, w, b):
    h = x + r
    return h, F.layer_norm(h, h.shape[-1:], w, b)


def _row_sum(x):
    return x.sum(-1)


def _log_softmax_and_max(x):
    return torch.log_softmax(x, -1), x.amax(-1)


CASES = {
    "softmax": (_softmax, 1),
    "layer_norm": (_layer_norm, 1),
    "add_layer_norm": (_add_layer_norm, 2),
    "row_sum": (_row_sum, 1),
    "log_softmax": (_log_softmax_and_max, 1),
}


def _inputs(case, rows, width, dtype, make):
    """``make(rows, width)`` for each [rows, width] input, then weight and bias of ``width``."""
    n_wide = CASES[case][1]
    wide = [make(rows, width) for _ in range(n_wide)]
    if "layer_norm" in case:
        wide += [torch.randn(width, dtype=dtype), torch.randn(width, dtype=dtype)]
    return tuple(wide)


#: loop-ir's device split off (``split_programs=0``: only its few-outputs rule, as on the CPU):
#: on a GPU it splits a few rows of 8192 into partials and a second kernel, where the
#: interpreter keeps one persistent kernel; its split is tested in loop-ir and
#: tests/test_codegen_triton_e2e.py, these tests test this backend's kernels on every device
NO_DEVICE_SPLIT = loop_ir.LoopIROptions(split_programs=0)


def _compile_and_check(fn, make_inputs, tol):
    inputs = make_inputs()
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    cg = loop_ir.compile_graph(gm, list(inputs), TritonBackend(), NO_DEVICE_SPLIT)
    for _ in range(2):  # fresh inputs each call
        inputs = make_inputs()
        got, expected = cg(*inputs), fn(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, **tol)
    return cg


def _reductions(cg):
    return [k.config for k in cg.kernels if k.config.rblock > 1]


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"]
)
@pytest.mark.parametrize("width", [1000, 4096, 5000, 8192])
@pytest.mark.parametrize("case", list(CASES))
def test_wide_rows_match_eager(case, width, dtype):
    fn = CASES[case][0]
    cg = _compile_and_check(
        fn,
        lambda: _inputs(case, ROWS, width, dtype, lambda r, w: torch.randn(r, w, dtype=dtype) * 2),
        TOL[dtype],
    )
    configs = _reductions(cg)
    assert configs and all(not c.looped and c.rblock >= width for c in configs), configs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("width", [4097, 8193])
@pytest.mark.parametrize("case", ["softmax", "layer_norm"])
def test_odd_widths_around_the_limit(case, width, dtype):
    """4097 pads to a persistent RBLOCK of 8192 (masked lanes must not count); 8193 loops."""
    cg = _compile_and_check(
        CASES[case][0],
        lambda: _inputs(case, ROWS, width, dtype, lambda r, w: torch.randn(r, w, dtype=dtype)),
        TOL[dtype],
    )
    configs = _reductions(cg)
    assert configs and all(c.looped == (width > 8192) for c in configs), configs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", ["softmax", "layer_norm", "row_sum"])
def test_strided_rows(case, dtype):
    """Rows of a wider tensor (a row stride past the row's end), and rows read down the columns
    of a transposed tensor (memory contiguous along x: the transposed block layout)."""
    width = 4096

    def sliced(r, w):
        return torch.randn(r, w + 40, dtype=dtype)[:, 8 : w + 8]

    def transposed(r, w):
        return torch.randn(w, r + 5, dtype=dtype).t()[:r]

    for make in (sliced, transposed):
        _compile_and_check(
            CASES[case][0], lambda make=make: _inputs(case, 9, width, dtype, make), TOL[dtype]
        )


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"]
)
@pytest.mark.parametrize("rows,cols", [(4096, 96), (1000, 257), (64, 4096)])
def test_column_sums(rows, cols, dtype):
    """The sum over rows (the outer dim): the transposed layout, x along contiguous memory."""
    tol = {"atol": 5e-2, "rtol": 2e-2} if dtype != torch.float32 else {"atol": 1e-3, "rtol": 1e-4}
    cg = _compile_and_check(
        lambda x: x.sum(0), lambda: (torch.randn(rows, cols, dtype=dtype),), tol
    )
    assert all(c.transposed for c in _reductions(cg))
