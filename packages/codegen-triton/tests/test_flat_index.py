"""Addresses rewritten in the flat xindex/rindex: linear where the data follows the ranges'
order, unchanged otherwise, and equal to the original at every point (brute force)."""

import itertools
import random

import sympy
from torchkiln_codegen_triton._flat_index import RFLAT, XFLAT, FlatIndex
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing, index_symbol

X = [index_symbol("x", i) for i in range(3)]
R = [index_symbol("r", i) for i in range(3)]


def _value(expr, at):
    return int(expr.subs(at))  # FloorDiv and ModularIndexing evaluate on integers


def test_layer_norm_grad_rows_become_linear():
    # the weight gradient of a [16, 512, 768] activation: x = [768], r = [16, 512]
    flat = FlatIndex([768], [16, 512])
    assert flat.rewrite(X[0] + 768 * R[1] + 393216 * R[0]) == XFLAT + 768 * RFLAT
    # a permuted read (stride 1 on the outer r range) keeps its form
    permuted = X[0] + 768 * R[0] + 12288 * R[1]
    assert flat.rewrite(permuted) == permuted


def test_channels_last_rows_merge_while_the_x_variables_stay():
    # batch-norm statistics over a channels-last [64, 256, 56, 56] image, split in 128 chunks:
    # x = [128 chunks, 256 channels], r = [28, 56] rows of a chunk. The x side alone keeps a
    # division (x0 is xindex // 256), so the whole rewrite is refused; the r side merges
    flat = FlatIndex([128, 256], [28, 56])
    index = X[1] + 256 * R[1] + 14336 * R[0] + 401408 * X[0]
    assert flat.rewrite(index) == X[1] + 256 * RFLAT + 401408 * X[0]
    # and the other way: x merges while a transposed r stays
    flat = FlatIndex([4, 8], [3, 5])
    index = 8 * X[0] + X[1] + 32 * R[1] + 160 * R[0] + 7 * R[0]
    out = flat.rewrite(index)
    assert XFLAT in out.free_symbols and not out.has(FloorDiv, ModularIndexing)


def test_rewrite_matches_the_original_everywhere():
    rng = random.Random(7)
    kept = linear = mixed = 0
    for _ in range(60):
        xr = [rng.choice([1, 2, 3, 4]) for _ in range(rng.choice([1, 2]))]
        rr = [rng.choice([1, 2, 3, 5]) for _ in range(rng.choice([1, 2, 3]))]
        xs, rs = X[: len(xr)], R[: len(rr)]
        dims = list(zip(xs + rs, xr + rr))
        order = dims[:] if rng.random() < 0.5 else rng.sample(dims, len(dims))
        stride, index = 1, sympy.Integer(rng.choice([0, 5]))
        for sym, size in reversed(order):  # a dense layout in ``order``, maybe with padding
            index += stride * sym
            stride *= size + rng.choice([0, 0, 1])
        if rng.random() < 0.3:
            index += 3 * ModularIndexing(rs[-1], 1, 2) + FloorDiv(xs[0], 2)
        out = FlatIndex(xr, rr).rewrite(index)
        kept += out == index
        linear += not out.has(FloorDiv, ModularIndexing)
        mixed += bool(out.free_symbols & set(xs + rs)) and bool(out.free_symbols & {XFLAT, RFLAT})
        for xp in itertools.product(*(range(n) for n in xr)):
            for rp in itertools.product(*(range(n) for n in rr)):
                at = dict(zip(xs + rs, xp + rp))
                xf = sum(
                    v * (sympy.prod(xr[i + 1 :]) if i + 1 < len(xr) else 1)
                    for i, v in enumerate(xp)
                )
                rf = sum(
                    v * (sympy.prod(rr[i + 1 :]) if i + 1 < len(rr) else 1)
                    for i, v in enumerate(rp)
                )
                assert _value(out, {**at, XFLAT: xf, RFLAT: rf}) == _value(index, at), (
                    index,
                    out,
                    xr,
                    rr,
                )
    assert kept > 5 and linear > 20 and mixed > 0
