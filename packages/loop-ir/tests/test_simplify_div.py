"""simplify_index's division rules against brute force: every simplified FloorDiv/ModularIndexing
of a random non-negative linear index equals the original at every point of its ranges."""

from __future__ import annotations

import itertools
import random

import sympy
from torchkiln_loop_ir._simplify import simplify_index
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing


def _value(expr, point):
    def ev(e):
        if isinstance(e, FloorDiv):
            a, b = (ev(x) for x in e.args)
            return a // b
        if isinstance(e, ModularIndexing):
            a, b, c = (ev(x) for x in e.args)
            return (a // b) % c
        if e.is_Symbol:
            return point[e]
        if e.is_Integer:
            return int(e)
        if e.is_Add:
            return sum(ev(x) for x in e.args)
        if e.is_Mul:
            out = 1
            for x in e.args:
                out *= ev(x)
            return out
        raise AssertionError(f"unexpected {e!r}")

    return ev(sympy.sympify(expr))


def _check_everywhere(expr, out, ranges, syms):
    """``out`` equals ``expr`` at every point of ``ranges``."""
    for point in itertools.product(*(range(ranges[s]) for s in syms)):
        at = dict(zip(syms, point))
        assert _value(out, at) == _value(expr, at), (expr, out, ranges, at)


def test_division_simplification_matches_brute_force():
    rng = random.Random(1234)
    x0, x1, x2 = syms = sympy.symbols("x0 x1 x2", integer=True, nonnegative=True)
    simplified = 0
    for _ in range(300):
        ranges = {s: rng.choice([1, 2, 3, 5, 7, 16, 17]) for s in syms}
        sizes = [ranges[s] for s in syms]
        stride = rng.choice([1, 2, 4, 16, 32, 48, 256])
        base = rng.choice([0, 1, 3]) + x2 + stride * x1 + stride * rng.choice([1, 2, 5, 17]) * x0
        div = rng.choice([2, 4, 8, 16, 17, 32, 64, 256, 4352, stride, stride * 17])
        mod = rng.choice([2, 3, 5, 17])
        for expr in (
            FloorDiv(base, div),
            ModularIndexing(base, div, mod),
            stride * FloorDiv(base, div) + ModularIndexing(base, 1, div),
        ):
            out = simplify_index(expr, ranges)
            simplified += out != expr
            for point in itertools.product(*(range(n) for n in sizes)):
                at = dict(zip(syms, point))
                assert _value(out, at) == _value(expr, at), (expr, out, ranges, at)
    assert simplified > 100  # the rules did fire on most draws


def test_vit_gelu_index_loses_its_division():
    x0, x1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)
    expr = x1 + 4352 * FloorDiv(256 * x0 + x1, 4352) + 256 * ModularIndexing(x0, 1, 17)
    out = simplify_index(expr, {x0: 34, x1: 256})
    # 4352*(x0 // 17) + 256*(x0 % 17) is 256*x0: the split of x0 by 17 recombines too
    assert out == x1 + 256 * x0
    assert simplify_index(FloorDiv(256 * x0 + x1 + 3, 512), {x0: 34, x1: 256}) == FloorDiv(
        256 * x0 + x1 + 3, 512
    )  # x1 + 3 can carry into the next 256


def test_quotient_and_remainder_merge_back():
    """c*(e // d % m) + c*m*(e // (d*m)) is c*(e // d): the rows of a [B, S, C] tensor read as
    one reduction range (GPT-2's bias gradients) index it linearly again."""
    x0, r0, r1 = syms = sympy.symbols("x0 r0 r1", integer=True, nonnegative=True)
    gpt2 = x0 + 1572864 * FloorDiv(r0, 512) + 3072 * ModularIndexing(r0, 1, 512)
    assert simplify_index(gpt2, {x0: 3072, r0: 8192}) == x0 + 3072 * r0
    rng = random.Random(99)
    merged = 0
    for _ in range(200):
        ranges = {s: rng.choice([1, 2, 3, 5, 7, 16]) for s in syms}
        base = rng.choice([0, 2]) + r0 + rng.choice([1, 3, 7, 16]) * r1
        c, d, m = rng.choice([1, 3, 8]), rng.choice([1, 2, 3]), rng.choice([2, 3, 4, 5])
        other = rng.choice([c * m, c * m + 1, 2 * c * m])  # only c*m merges
        expr = x0 + c * ModularIndexing(base, d, m) + other * FloorDiv(base, d * m)
        out = simplify_index(expr, ranges)
        merged += not out.has(ModularIndexing)
        _check_everywhere(expr, out, ranges, syms)
    assert merged > 40


def test_split_and_merge_recombination_matches_brute_force():
    # c*FloorDiv(e, c) + ModularIndexing(e', 1, c) is e when e - e' is a multiple of c; with
    # e - e' not a multiple (or other coefficients) it must stay as it was
    rng = random.Random(99)
    x0, x1, x2 = syms = sympy.symbols("x0 x1 x2", integer=True, nonnegative=True)
    recombined = 0
    for _ in range(150):
        ranges = {s: rng.choice([1, 2, 3, 5, 16, 17]) for s in syms}
        sizes = [ranges[s] for s in syms]
        c = rng.choice([2, 4, 16, 17, 32])
        e = x2 + rng.choice([1, 3, c]) * x1 + rng.choice([c, 2 * c, 5]) * x0
        other = e - rng.choice([0, 0, c * x0, c * x1, 1, x0]) + rng.choice([0, c, 2 * c, 1])
        k = rng.choice([1, 2, 3])
        outer = rng.choice([1, 2, 8, 64])
        expr = k * c * FloorDiv(e, c) + rng.choice([k, k + 1]) * ModularIndexing(other, 1, c)
        for wrapped in (expr, outer * FloorDiv(expr, outer) + ModularIndexing(expr, 1, outer)):
            out = simplify_index(wrapped, ranges)
            recombined += not out.has(FloorDiv, ModularIndexing)
            for point in itertools.product(*(range(n) for n in sizes)):
                at = dict(zip(syms, point))
                assert _value(out, at) == _value(wrapped, at), (wrapped, out, ranges, at)
    assert recombined > 25


def test_view_split_then_merge_reads_where_it_was_written():
    # mlp_mixer: a (2, 64, 32) buffer written by the bias add, read as (128, 32) by the GELU;
    # equal indices make the two one kernel
    x0 = sympy.Symbol("x0", integer=True, nonnegative=True)
    merged = 32 * FloorDiv(x0, 32) + ModularIndexing(x0, 1, 32)
    read = (
        2048 * FloorDiv(merged, 2048)
        + 32 * ModularIndexing(merged, 32, 64)
        + ModularIndexing(ModularIndexing(x0, 1, 32), 1, 32)
    )
    write = (
        2048 * FloorDiv(x0, 2048) + ModularIndexing(x0, 1, 32) + 32 * ModularIndexing(x0, 32, 64)
    )
    assert simplify_index(read, {x0: 4096}) == simplify_index(write, {x0: 4096})


def test_a_remembered_simplification_is_keyed_by_its_ranges():
    # simplify_index remembers its answers: the same expression under other ranges must not get
    # the remembered one (here: x1 < 256 drops the carry, x1 < 300 keeps it), in either order
    from torchkiln_loop_ir._simplify import _simplify, _simplify_remembered

    x0, x1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)
    expr = FloorDiv(256 * x0 + x1, 256)
    for order in ((256, 300), (300, 256), (256, 300)):
        for size in order:
            got = simplify_index(expr, {x0: 8, x1: size})
            assert got == _simplify(expr, {x0: 8, x1: size})
            assert got == (x0 if size == 256 else expr), (size, got)
            for x in (0, 3, 7):  # and it is right where the two answers differ
                for y in (0, 255, size - 1):
                    assert _value(got, {x0: x, x1: y}) == (256 * x + y) // 256
    assert _simplify_remembered.cache_info().hits > 0


def test_remainders_split_at_a_factor_of_the_modulus_match_brute_force():
    """``(lo + hi) % mod`` with ``hi`` a multiple of a factor of ``mod`` and ``lo`` below it
    (``(r0 + 28*x0) % 56``), and remainders that never wrap, against every point."""
    rng = random.Random(23)
    x0, x1, x2 = syms = sympy.symbols("x0 x1 x2", integer=True, nonnegative=True)
    split = 0
    for _ in range(300):
        m = rng.choice([2, 4, 7, 28])
        ranges = {
            x0: rng.choice([1, 2, 3, 8, 9]),
            x1: rng.choice([1, 2, 5]),
            x2: rng.choice([1, m - 1, m, m + 1]),
        }
        mod = m * rng.choice([1, 2, 3, 4])
        base = x2 + m * rng.choice([1, 2, 3]) * x0 + m * rng.choice([1, 5]) * x1
        div = rng.choice([1, 1, 2])
        expr = ModularIndexing(base, div, mod)
        out = simplify_index(expr, ranges)
        split += not out.has(ModularIndexing) or out.args != expr.args
        _check_everywhere(expr, out, ranges, syms)
    assert split > 100


def test_channels_last_half_image_chunks_index_linearly():
    """Batch-norm statistics over channels-last images split in chunks of half an image: the
    load's index is linear (no division a value) once simplified over the kernel's ranges."""
    r0, r1, x0, x1 = sympy.symbols("r0 r1 x0 x1", integer=True, nonnegative=True)
    expr = x1 + 256 * r1 + 14336 * ModularIndexing(r0 + 28 * x0, 1, 56)
    expr += 802816 * ModularIndexing(x0, 2, 64)
    out = simplify_index(expr, {r0: 28, r1: 56, x0: 128, x1: 256})
    assert out == 14336 * r0 + 256 * r1 + 401408 * x0 + x1


def test_whole_turns_of_a_remainder_drop_match_brute_force():
    """Terms of a multiple of ``div * mod`` leave ``(base // div) % mod`` unchanged: they are
    dropped (the other terms free to carry), on every point of random ranges."""
    rng = random.Random(7)
    x0, x1, x2 = syms = sympy.symbols("x0 x1 x2", integer=True, nonnegative=True)
    dropped = 0
    for _ in range(300):
        div, mod = rng.choice([1, 2, 4, 32]), rng.choice([2, 3, 4])
        ranges = {x0: rng.choice([1, 3, 5]), x1: rng.choice([1, 7, 2 * div * mod + 1]), x2: 3}
        base = x1 + rng.choice([1, 2, 3]) * div * mod * x0 + rng.choice([0, 1, 5]) * x2
        expr = ModularIndexing(base, div, mod)
        out = simplify_index(expr, ranges)
        dropped += not out.has(x0)
        _check_everywhere(expr, out, ranges, syms)
    assert dropped > 250


def test_rotary_halves_index_linearly():
    """Llama's rotary embedding (rotate_half's cat read back through a view of [.., 4, 32]):
    ``32*(((x1 + 128*x0) // 32) % 4) + 128*x0 + x1 % 32`` is ``x1 + 128*x0`` for ``x1 < 128``:
    a contiguous load with no division a value."""
    x0, x1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)
    expr = 32 * ModularIndexing(x1 + 128 * x0, 32, 4) + 128 * x0 + ModularIndexing(x1, 1, 32)
    assert simplify_index(expr, {x0: 1024, x1: 128}) == x1 + 128 * x0
    assert simplify_index(expr - 16, {x0: 1024, x1: 128}) == x1 + 128 * x0 - 16


def test_torchs_floordiv_beside_this_modules_terminates_with_the_same_value():
    """Fuzz seed 54222 (a max pool's output size ``(s - 1) // 2 + 1`` under dynamic shapes): an
    index summing torch's ``FloorDiv`` (from a ShapeEnv size) and this module's of the same
    arguments sorted the two either way after each pass, and the fixpoint never came (a
    RecursionError, and the graph ran eagerly). It now stops, and the value is the same at
    every size."""
    from torch.utils._sympy.functions import FloorDiv as TorchFloorDiv

    s = sympy.Symbol("s49", integer=True, positive=True)
    x = sympy.Symbol("x1", integer=True, nonnegative=True)
    expr = x + FloorDiv(s - 1, 2) + TorchFloorDiv(s - 1, 2) + 2
    out = simplify_index(expr, {x: 2 * FloorDiv(s - 1, 2) + 2})
    for size in range(1, 12):
        for xv in range(2 * ((size - 1) // 2) + 2):
            values = {s: size, x: xv}
            assert int(out.subs(values)) == int(expr.subs(values)) == xv + 2 * ((size - 1) // 2) + 2


def test_a_modulus_of_a_floordiv_is_one_form_and_recombines():
    """``(x // 16) % 4`` (``ModularIndexing(FloorDiv(x, 16), 1, 4)``, what merge_dims composed
    for a permuted node of XGLM's attention backward) is ``ModularIndexing(x, 16, 4)``, and the
    unflattened index of 128 merged rows folds back to ``16*x0``, as its writer's does: the C++
    code generator matched the read to the write by its text, and the kernel failed."""
    x0 = sympy.Symbol("x0", integer=True, nonnegative=True)
    assert ModularIndexing(FloorDiv(x0, 16), 1, 4) == ModularIndexing(x0, 16, 4)
    assert ModularIndexing(FloorDiv(x0, 16), 2, 4) == ModularIndexing(x0, 32, 4)
    expr = (
        1024 * FloorDiv(x0, 64)
        + 16 * ModularIndexing(x0, 1, 16)
        + 256 * ModularIndexing(FloorDiv(x0, 16), 1, 4)
    )
    assert simplify_index(expr, {x0: 128}) == 16 * x0
    for xv in range(128):
        assert _value(expr, {x0: xv}) == 16 * xv
