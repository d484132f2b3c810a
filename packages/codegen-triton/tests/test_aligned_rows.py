"""The aligned walk (``_aligned.py``): looped row reductions whose rows start off a 16-byte
boundary (rows of 50257, 1023, 1025, 4097) walk each row from its start rounded down, the inside
blocks unmasked. Softmax, log_softmax, cross-entropy and the softmax backward, sum, amax, argmax
and layer norm, over 1, 3 and 7 rows, in float32, bfloat16 and float16, from contiguous tensors,
slices at odd offsets and strides, broadcast operands and 3-D inputs, against eager on fresh
random inputs (Triton's interpreter). Rows of 1023-4097 are persistent by default: options with
small ``persistent_rnumel``/``looped_rblock`` force them to loop in blocks of 256-2048 (one
block per row, two trailing blocks, many inside blocks). That the inside loads and stores become
16-byte vector accesses is checked on the PTX of an sm_90 compile (``_ptx_main.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend, TritonOptions, autotune

loop_ir = pytest.importorskip("torchkiln_loop_ir")

WALK = "aligned walk"
EDGES = "rbase = tl.arange(0, 16)"  # a whole walked row's edge block, 2-byte values
TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-4},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = ["f32", "bf16", "f16"]


def _looped(persistent: int, rblock: int) -> TritonOptions:
    # split_max_chunks=1: a sum over few rows is not split into partials (the walk is for the
    # one-kernel r-loop)
    return TritonOptions(persistent_rnumel=persistent, looped_rblock=rblock, split_max_chunks=1)


#: row length -> options making it a looped kernel (50257 loops by default), and the shape of
#: the walk: blocks of 512 over 1023 (the last two blocks trail), 256 over 1025 (inside blocks),
#: 1024 over 4097, 4096 over 50257
WIDTHS = {
    50257: TritonOptions(split_max_chunks=1),
    1023: _looped(256, 512),
    1025: _looped(256, 256),
    4097: _looped(1024, 1024),
}


def _softmax(x):
    return (torch.softmax(x, -1),)


def _log_softmax(x):
    return (torch.log_softmax(x, -1),)


def _sum_amax(x):
    return x.sum(-1), x.amax(-1)


def _argmax(x):
    return (x.argmax(-1),)


def _layer_norm(x, w, b):
    return (F.layer_norm(x, x.shape[-1:], w, b),)


def _softmax_backward(x, g):
    y = torch.softmax(x, -1)
    return y, torch.ops.aten._softmax_backward_data(g, y, -1, x.dtype)


def _cross_entropy(x, t):
    """Mean cross-entropy of float32 logits (float64 for the reference) and its gradient."""
    logits = x.to(torch.promote_types(x.dtype, torch.float32))
    loss = F.cross_entropy(logits, t)
    z = torch.log_softmax(logits, -1)
    onehot = torch.zeros_like(z).scatter(1, t[:, None], 1.0)
    grad = torch.ops.aten._log_softmax_backward_data(-onehot / x.shape[0], z, -1, z.dtype)
    return loss, grad


def _inputs(fn, rows, width, dtype, make=None):
    make = make or (lambda r, w: torch.randn(r, w, dtype=dtype) * 3)
    x = make(rows, width)
    if fn is _layer_norm:
        return x, torch.randn(width, dtype=dtype), torch.randn(width, dtype=dtype)
    if fn is _softmax_backward:
        return x, torch.randn(rows, width, dtype=dtype)
    if fn is _cross_entropy:
        return x, torch.randint(0, width, (rows,))
    if fn is _argmax:  # few distinct values: ties across blocks, the first index must win
        return (torch.randint(-20, 20, (rows, width)).to(dtype),)
    return (x,)


def _compile(fn, inputs, options):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    return loop_ir.compile_graph(gm, list(inputs), TritonBackend(options))


def _check(cg, fn, inputs, dtype):
    """Forward outputs within the dtype's tolerance of eager; a backward or a loss (computed from
    unrounded intermediates in one kernel, from rounded ones in eager) at most twice as far from
    the float64 result as eager is."""
    got, expected = cg(*inputs), fn(*inputs)
    assert len(got) == len(expected)
    if fn not in (_softmax_backward, _cross_entropy):
        exact = fn(*[i.double() if i.is_floating_point() else i for i in inputs])
        for g, e, r in zip(got, expected, exact):
            assert g.dtype == e.dtype and g.shape == e.shape
            if g.is_floating_point() and not torch.allclose(g, e, equal_nan=True, **TOL[dtype]):
                # a sum of 50257 values that nearly cancel (a result of 36 from terms of 1):
                # eager's summation order and ours differ by a few of the result's ulps, beyond
                # a tolerance relative to the result. Ours must then be as near the float64
                # sum as eager's (twice its error), give or take one ulp of the result's dtype
                ours, eagers = (g.double() - r).abs(), (e.double() - r).abs()
                ulp = torch.finfo(dtype).eps * r.abs()
                bound = 2 * eagers + ulp
                x = inputs[0]
                if x.shape[:-1] == g.shape:
                    # a reduction over the row, accumulated in float32 by both: rounding in any
                    # summation order is bounded by float32's eps times the magnitudes summed,
                    # plus the result's rounding (a row sum 1.8e-4 off where eager's was 0.8e-4
                    # off, and that bound 2e-2; a dropped or doubled term is off by one of the
                    # terms, about 1)
                    summed = torch.finfo(torch.float32).eps * x.double().abs().sum(-1)
                    bound = torch.maximum(bound, summed + ulp)
                assert (ours <= bound).all(), (g, e, r)
            else:
                torch.testing.assert_close(g, e, equal_nan=True, **TOL[dtype])
        return
    wide = [i.double() if i.is_floating_point() else i for i in inputs]
    for g, e, r in zip(got, expected, fn(*wide)):
        assert g.dtype == e.dtype and g.shape == e.shape
        ours, eagers = (g.double() - r).abs(), (e.double() - r).abs()
        # plus one rounding of the output's dtype at the result's scale (test_online_softmax.py)
        step = max(1e-5, torch.finfo(g.dtype).eps) if g.is_floating_point() else 1e-5
        assert ours.max() <= 2 * eagers.max() + step * (1 + r.abs().max()), (ours.max(), eagers)


def _calls(width: int) -> int:
    """Calls with fresh inputs per compiled graph: one for rows of 50257 (slow to interpret)."""
    return 1 if width > 10000 else 2


def _walked(cg) -> list[str]:
    return [k.source for k in cg.kernels if WALK in k.source]


FNS = [_softmax, _log_softmax, _sum_amax, _argmax, _layer_norm, _softmax_backward, _cross_entropy]
FN_IDS = ["softmax", "log_softmax", "sum_amax", "argmax", "layer_norm", "softmax_bwd", "xent"]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("fn", FNS, ids=FN_IDS)
def test_walk_matches_eager(fn, width, dtype):
    """Every case takes the walk (its kernel over the rows says so) and matches eager; the rows
    per tensor (1, 3, 7) rotate over the cases."""
    rows = (1, 3, 7)[(FNS.index(fn) + list(WIDTHS).index(width) + DTYPES.index(dtype)) % 3]
    cg = _compile(fn, _inputs(fn, rows, width, dtype), WIDTHS[width])
    assert _walked(cg), [k.source for k in cg.kernels]
    for _ in range(_calls(width)):  # fresh inputs each call
        _check(cg, fn, _inputs(fn, rows, width, dtype), dtype)


def _sliced(offset: int, pad: int, dtype):
    """Rows of a wider tensor at a storage offset: neither the first row nor the row stride on a
    16-byte boundary."""
    return lambda r, w: (torch.randn(r, w + pad, dtype=dtype) * 3)[:, offset : offset + w]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("width", [50257, 1025])
@pytest.mark.parametrize(
    "fn",
    [_softmax, _layer_norm, _cross_entropy, _sum_amax],
    ids=FN_IDS[:1] + ["layer_norm", "xent", "sum_amax"],
)
def test_sliced_inputs(fn, width, dtype):
    """Inputs that are slices (storage offset 3, row stride ``width + 11``; the output is
    contiguous, another residue class: its stores keep their own addresses) and, for 1 row, a
    row at an odd offset of a flat buffer."""
    for rows, make in (
        (3, _sliced(3, 11, dtype)),
        (1, lambda r, w: torch.randn(w + 5, dtype=dtype)[5:][None]),
    ):
        cg = _compile(fn, _inputs(fn, rows, width, dtype, make), WIDTHS[width])
        assert _walked(cg)
        for _ in range(_calls(width)):
            _check(cg, fn, _inputs(fn, rows, width, dtype, make), dtype)


def _extremes(x):
    return x.amax(-1), x.amin(-1), x.sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("width", [50257, 1025, 1023])
def test_neighbouring_rows_stay_out(width, dtype):
    """The first block loads from the vector boundary before the row's start (an earlier row's
    last values) and the last block up to the one after its end (the next row's first values),
    unmasked (``AlignedWalk.load_masks``): those lanes must stay out of every reduction. Row i
    holds values near 100 * i, so a row that took in its neighbour's values would have a wrong
    max (the next row's), min (the earlier row's) or sum."""
    rows = 7

    def make():
        return (torch.randn(rows, width) + 100 * torch.arange(rows)[:, None]).to(dtype)

    cg = _compile(_extremes, (make(),), WIDTHS[width])
    assert _walked(cg)
    for _ in range(_calls(width)):
        x = make()
        got, expected = cg(x), _extremes(x)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        # the sum within a rounding of its dtype (a neighbour's 8 values near 100 would move a
        # float32 sum of rows 1-6 by 800, far past it)
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(got[2].double(), x.double().sum(-1), rtol=eps, atol=1.0)


def _biased_softmax(x, bias, scale):
    """A [W] bias broadcast over the rows (row start 0: another residue class than x's) and a
    per-row scale [R, 1] (no r at all)."""
    return (torch.softmax(x * scale + bias, -1),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("width", [50257, 1023])
def test_broadcast_operands_and_3d_rows(width, dtype):
    options = WIDTHS[width]
    make = lambda: (  # noqa: E731
        torch.randn(5, width, dtype=dtype) * 3,
        torch.randn(width, dtype=dtype),
        torch.rand(5, 1, dtype=dtype) + 0.5,
    )
    cg = _compile(_biased_softmax, make(), options)
    (src,) = _walked(cg)
    assert "rrow + rpos" in src and "(r0)" in src  # x at the aligned rows, the bias by rindex
    for _ in range(_calls(width)):
        _check(cg, _biased_softmax, make(), dtype)
    # rows of a [2, 3, W] tensor (two x ranges) and of its slice along the middle dim
    for make3 in (
        lambda: (torch.randn(2, 3, width, dtype=dtype) * 3,),
        lambda: ((torch.randn(2, 5, width, dtype=dtype) * 3)[:, 1:4],),
    ):
        cg = _compile(_log_softmax, make3(), options)
        assert _walked(cg)
        for _ in range(_calls(width)):
            _check(cg, _log_softmax, make3(), dtype)


def test_several_rows_per_program(monkeypatch):
    """Blocks of 256 with 4 rows per program (XBLOCK 4, a looped tile of 1024; the grid-filling
    rule turned off): each row has its own shift, and the rows past the last are masked."""
    monkeypatch.setattr(autotune, "MIN_PROGRAMS", 1)
    for fn in (_softmax, _sum_amax, _layer_norm):
        make = lambda fn=fn: _inputs(fn, 7, 1025, torch.float32)  # noqa: E731
        cg = _compile(fn, make(), WIDTHS[1025])
        assert _walked(cg) and any(k.config.xblock == 4 for k in cg.kernels)
        # the online softmax's groups keep the row order: a reordering reshape let Triton 3.6
        # mix these 4 rows on the H200 (wrong sums), which the interpreter never does
        assert all("can_reorder" not in k.source for k in cg.kernels)
        for _ in range(2):
            _check(cg, fn, make(), torch.float32)


def test_one_block_per_row():
    """A row of 1025 in one block of 2048: the first block is the whole row, no inside or
    trailing block runs."""
    options = _looped(256, 4096)
    for fn in (_softmax, _argmax):
        make = lambda fn=fn: _inputs(fn, 3, 1025, torch.float16)  # noqa: E731
        cg = _compile(fn, make(), options)
        assert _walked(cg) and cg.kernels[0].config.rblock == 2048
        for _ in range(2):
            _check(cg, fn, make(), torch.float16)


def test_where_the_walk_is_not_taken():
    """Persistent rows (1025 by default), rows of a multiple of 16 starting on a vector boundary
    (16384), rows shorter than 512, the option off, and a reduction down the columns (no access
    contiguous along r) keep the plain r-loop, and still match eager."""
    x = torch.randn(3, 1025)
    cases = [
        (_softmax, (x,), TritonOptions()),
        (_softmax, (torch.randn(3, 16384),), TritonOptions()),
        (_softmax, (torch.randn(3, 500),), _looped(128, 128)),
        (_softmax, (torch.randn(3, 50257),), TritonOptions(aligned_rows=False)),
        (lambda x: (torch.softmax(x, 0),), (torch.randn(1025, 6),), _looped(256, 256)),
    ]
    for fn, inputs, options in cases:
        cg = _compile(fn, inputs, options)
        assert not _walked(cg)
        _check(cg, fn, tuple(torch.randn_like(i) for i in inputs), torch.float32)
    # rows of 4104 bfloat16: a multiple of 8 but not of 16 (the plain loop's mask bound is not
    # known divisible by 16: scalar loads), so the walk, with every shift 0
    cg = _compile(_softmax, (torch.randn(3, 4104, dtype=torch.bfloat16),), _looped(1024, 1024))
    assert _walked(cg)
    _check(cg, _softmax, (torch.randn(3, 4104, dtype=torch.bfloat16),), torch.bfloat16)


def test_inside_blocks_load_and_store_16_bytes_per_thread():
    """Compiled for an H200 (sm_90) on the CPU (``_ptx_main.py``, a fresh process: the test
    process runs Triton's interpreter): the softmax over rows of 50257 has 16-byte vector loads
    and stores with the walk and only scalar ones without it. Every load of the walk is a vector
    load, the first and last blocks' too (their ``rload`` masks are constant over each vector);
    so is every store but the ``vec`` lanes at each end of the row (``redge``: a store must
    not touch the lanes outside the row). The walk's kernel reads its rows twice at 32 warps;
    in bfloat16 it keeps to 32 registers a thread without spilling (two programs a SM: the
    edges' scalar stores took it to 42-64 on Triton 3.6, half the programs resident, 53% of the
    bandwidth on an H200 where rows of 50256 ran at 73%); float32 rows, 200 KB, take one
    program a SM (at most 64 registers)."""
    here = os.path.dirname(__file__)
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run(
        [sys.executable, os.path.join(here, "_ptx_main.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if out.returncode == 77:
        pytest.skip(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    for dtype in ("bfloat16", "float32"):
        plain, walked = counts[dtype]["plain"], counts[dtype]["walk"]
        assert plain["vector_loads"] == 0 and plain["vector_stores"] == 0, counts
        assert walked["vector_loads"] > 0 and walked["vector_stores"] > 0, counts
        assert walked["scalar_loads"] == 0, counts
        # one store of the row: a thread's vectors in each of the three loops, the edges'
        # lanes of the first and the last block one at a time (a thread's values each)
        vec = 16 // (torch.finfo(getattr(torch, dtype)).bits // 8)
        per_thread = walked["rblock"] // (32 * walked["num_warps"])
        assert walked["vector_stores"] == 3 * per_thread // vec, counts
        assert walked["scalar_stores"] == 2 * per_thread, counts
        # bfloat16 rows (100 KB): two programs a SM, 32 registers; float32 rows (200 KB): one
        # program a SM (more than 128 KB a row), uncapped, RBLOCK 16384
        cap = 32 if dtype == "bfloat16" else 0
        assert (walked["num_warps"], walked["maxnreg"]) == (32, cap), counts
        if walked["registers"] >= 0:
            assert walked["registers"] <= (cap or 64) and walked["spill_bytes"] == 0, counts
    # bfloat16 rows held whole (walked_rows_whole): one block of 65536 at 16 warps, 128 values
    # a thread: 16 vector loads and 16 vector stores a thread, no scalar load of the row, and
    # the edge lanes stored from their own block of 16 (one scalar store: a lane each)
    whole = counts["bfloat16"]["whole"]
    assert (whole["rblock"], whole["num_warps"]) == (65536, 16), counts
    assert whole["vector_loads"] == whole["vector_stores"] == 16, counts
    assert whole["scalar_stores"] == 1, counts
    if whole["registers"] >= 0:
        assert whole["registers"] <= 128 and whole["spill_bytes"] == 0, counts


@pytest.mark.parametrize("rnumel", [513, 1023, 1025, 4097, 30522, 50257])
@pytest.mark.parametrize("rblock", [4, 256, 1024, 8192, 16384])
@pytest.mark.parametrize("vec", [4, 8])
def test_walked_lanes_counts_the_walks_blocks(rnumel, rblock, vec):
    """``_aligned.walked_lanes`` (which the few-rows rule compares block sizes by) is the
    positions the three loops of ``AlignedWalk.loops`` visit, counted by running their ranges."""
    from torchkiln_codegen_triton._aligned import walked_lanes

    first = (rblock + vec - 1) // rblock * rblock
    inner = rnumel // rblock * rblock
    loops = (
        range(0, first, rblock),
        range(first, inner, rblock),
        range(max(inner, first), rnumel + vec - 1, rblock),
    )
    assert walked_lanes(rnumel, rblock, vec) == sum(len(r) for r in loops) * rblock


def _whole(rblock: int, **kw) -> TritonOptions:
    """Rows that would loop (``_looped``) held whole from their aligned start instead."""
    return TritonOptions(
        persistent_rnumel=256,
        looped_rblock=256,
        split_max_chunks=1,
        walked_rows_whole=rblock,
        **kw,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize(
    "fn",
    [_softmax, _log_softmax, _layer_norm, _cross_entropy],
    ids=FN_IDS[:2] + FN_IDS[4:5] + ["xent"],
)
def test_whole_rows_walked(fn, dtype):
    """``TritonOptions.walked_rows_whole``: a 2-byte row a looped kernel would read twice is
    one persistent block from its aligned start (rows of 1025 in a block of 2048; 1, 3 and 7
    rows; a slice at an odd offset and stride), and matches eager."""
    options = _whole(2048)
    makes = [None, _sliced(3, 11, dtype)]
    for rows, make in zip((1, 3, 7), makes + [None]):
        cg = _compile(fn, _inputs(fn, rows, 1025, dtype, make), options)
        walked = [k for k in cg.kernels if k.config.walked]
        if fn in (_layer_norm, _cross_entropy) and not walked:
            # a kernel that reads its rows once (layer norm's statistics are Welford's, one
            # r-loop; cross-entropy's loss sums its log-probabilities in one pass) keeps the
            # looped walk
            assert _walked(cg) and all(k.config.looped for k in cg.kernels if WALK in k.source)
        else:
            assert walked and all(not k.config.looped and WALK in k.source for k in walked)
            # the edge lanes from a block of their own (AlignedWalk.edge_lines), where the
            # output is walked too (a sliced input's output is another residue class: its
            # stores keep their own addresses and masks, no edge lanes)
            assert all((EDGES in k.source) == (make is None) for k in walked)
        for _ in range(2):
            _check(cg, fn, _inputs(fn, rows, 1025, dtype, make), dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_whole_rows_with_broadcast_operands_and_3d_rows(dtype):
    """A whole walked row's edge block reads a broadcast [W] bias by its own ``rindex`` and a
    per-row scale (no r), and rows of a [2, 3, W] tensor and of a slice along its middle dim."""
    options = _whole(2048)
    make = lambda: (  # noqa: E731
        torch.randn(5, 1025, dtype=dtype) * 3,
        torch.randn(1025, dtype=dtype),
        torch.rand(5, 1, dtype=dtype) + 0.5,
    )
    cg = _compile(_biased_softmax, make(), options)
    (kernel,) = [k for k in cg.kernels if k.config.walked]
    assert EDGES in kernel.source and "(r0)" in kernel.source
    for _ in range(2):
        _check(cg, _biased_softmax, make(), dtype)
    for make3 in (
        lambda: (torch.randn(2, 3, 1025, dtype=dtype) * 3,),
        lambda: ((torch.randn(2, 5, 1025, dtype=dtype) * 3)[:, 1:4],),
    ):
        cg = _compile(_log_softmax, make3(), options)
        assert any(k.config.walked for k in cg.kernels)
        for _ in range(2):
            _check(cg, _log_softmax, make3(), dtype)


@pytest.mark.parametrize("width", [1025, 1023])
def test_whole_rows_keep_neighbours_out(width):
    """The whole-row block loads from the vector boundary before the row's start and up to the
    one after its end: the neighbours' values stay out of the row's max and sum (row i near
    100 * i, as ``test_neighbouring_rows_stay_out``), and its stores leave them unchanged
    (``torch.equal`` of the softmax of rows whose neighbours would dominate it)."""
    rows = 7

    def make():
        return (torch.randn(rows, width) + 100 * torch.arange(rows)[:, None]).to(torch.bfloat16)

    cg = _compile(_softmax, (make(),), _whole(2048))
    assert [k for k in cg.kernels if k.config.walked]
    for _ in range(2):
        x = make()
        _check(cg, _softmax, (x,), torch.bfloat16)
        assert ((cg(x)[0].float().sum(-1) - 1).abs() < 0.05).all()


def test_whole_rows_need_the_block_to_cover_the_shift():
    """A row of 2045 bfloat16 values needs 2052 positions from its aligned start: a block of
    2048 cannot hold it, so ``walked_rows_whole=2048`` keeps the loop, and 4096 holds it; a
    float32 row, and the option at 0, keep the loop too."""
    x = torch.randn(3, 2045, dtype=torch.bfloat16)
    cases = [
        (x, _whole(2048), False),
        (x, _whole(4096), True),
        (x.float(), _whole(4096), False),
        (x, _whole(0), False),
    ]
    for inp, options, walked in cases:
        cg = _compile(_softmax, (inp,), options)
        assert any(k.config.walked for k in cg.kernels) == walked, options
        _check(cg, _softmax, (torch.randn_like(inp),), inp.dtype)


def test_whole_rows_of_gpt2s_vocabulary():
    """Rows of 50257 bfloat16 in one block of 65536 (``walked_rows_whole=65536``, the size the
    option is for), against eager."""
    options = TritonOptions(split_max_chunks=1, walked_rows_whole=65536)
    make = lambda: (torch.randn(2, 50257, dtype=torch.bfloat16) * 3,)  # noqa: E731
    cg = _compile(_softmax, make(), options)
    (kernel,) = [k for k in cg.kernels if k.config.walked]
    assert kernel.config.rblock == 65536 and kernel.config.num_warps == 16
    _check(cg, _softmax, make(), torch.bfloat16)
