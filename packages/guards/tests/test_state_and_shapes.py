"""GlobalStateMatch, StorageAliasMatch and ShapeGuard: pass, fail, and the reason text."""

import sympy
import torch
from torch.overrides import TorchFunctionMode
from torchkiln_guards import GlobalStateMatch, LocalSource, ShapeGuard, StorageAliasMatch

X, Y = LocalSource("x"), LocalSource("y")


def f(x, y):
    return x + y


def test_global_state_grad_mode(h):
    cg = h.build(f, [GlobalStateMatch.capture()])
    x, y = torch.randn(3), torch.randn(3)
    h.expect_pass(cg, x, y)
    with torch.no_grad():
        h.expect_fail(cg, "torch.is_grad_enabled(): expected True, got False", x, y)
        cg_nograd = h.build(f, [GlobalStateMatch.capture()])
        h.expect_pass(cg_nograd, x, y)
    h.expect_fail(cg_nograd, "torch.is_grad_enabled(): expected False, got True", x, y)
    torch.testing.assert_close(f(x, y), x + y)


def test_global_state_default_dtype_and_deterministic(h):
    cg = h.build(f, [GlobalStateMatch.capture()])
    x, y = torch.randn(3), torch.randn(3)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        h.expect_fail(
            cg, "torch.get_default_dtype(): expected torch.float32, got torch.float64", x, y
        )
    finally:
        torch.set_default_dtype(old)
    was = torch.are_deterministic_algorithms_enabled()
    # the flag itself: torch.use_deterministic_algorithms would also import torch._inductor's config
    torch._C._set_deterministic_algorithms(not was)
    try:
        h.expect_fail(
            cg, f"torch.are_deterministic_algorithms_enabled(): expected {was}, got {not was}", x, y
        )
    finally:
        torch._C._set_deterministic_algorithms(was)
    h.expect_pass(cg, x, y)


def test_global_state_autocast_and_function_modes(h):
    cg = h.build(f, [GlobalStateMatch.capture()])
    x, y = torch.randn(3), torch.randn(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h.expect_fail(cg, "torch.is_autocast_enabled('cpu'): expected False, got True", x, y)
        inside = h.build(f, [GlobalStateMatch.capture()])
        h.expect_pass(inside, x, y)
    with torch.autocast("cpu", dtype=torch.float16):
        h.expect_fail(
            inside,
            "torch.get_autocast_dtype('cpu'): expected torch.bfloat16, got torch.float16",
            x,
            y,
        )
    with TorchFunctionMode():
        h.expect_fail(cg, "len(torch function mode stack): expected 0, got 1", x, y)
    h.expect_pass(cg, x, y)


def test_storage_alias(h):
    base = torch.randn(8)
    x, y = base[:4], base[4:]
    no_alias = h.build(f, [StorageAliasMatch(X, Y, False)])
    alias = h.build(f, [StorageAliasMatch(X, Y, True)])
    a, b = torch.randn(4), torch.randn(4)
    h.expect_pass(no_alias, a, b)
    h.expect_fail(no_alias, "L['x'] aliases L['y']: expected False, got True", x, y)
    h.expect_pass(alias, x, y)
    h.expect_fail(alias, "L['x'] aliases L['y']: expected True, got False", a, b)
    # two empty tensors have distinct storages even though both data pointers are 0
    h.expect_pass(no_alias, torch.empty(0), torch.empty(0))
    torch.testing.assert_close(f(x, y), base[:4] + base[4:])


def test_shape_guard_relations(h):
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    syms = {s0: (X, 0), s1: (Y, 0)}
    cg = h.build(f, [ShapeGuard(sympy.Eq(s0, s1), syms)])
    h.expect_pass(cg, torch.randn(5), torch.randn(5))
    h.expect_fail(
        cg,
        "Eq(L['x'].size()[0], L['y'].size()[0]): expected True, got False "
        "[L['x'].size()[0]=5, L['y'].size()[0]=6]",
        torch.randn(5),
        torch.randn(6),
    )
    rel = sympy.And(s0 >= 2, sympy.Eq(sympy.Mod(s0, 4), 0), s1 < 2 * s0)
    cg = h.build(f, [ShapeGuard(rel, syms)])
    h.expect_pass(cg, torch.randn(8), torch.randn(15))
    h.expect_fail(cg, None, torch.randn(8), torch.randn(16))
    h.expect_fail(cg, None, torch.randn(6), torch.randn(1))
    h.expect_pass(cg, torch.randn(4), torch.randn(7))


def test_shape_guard_with_torch_sympy_functions(h):
    from torch.utils._sympy.functions import FloorDiv

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    cg = h.build(f, [ShapeGuard(sympy.Eq(FloorDiv(s0, 2), 3), {s0: (X, 1)})])
    h.expect_pass(cg, torch.randn(2, 7), torch.randn(1))
    h.expect_pass(cg, torch.randn(2, 6), torch.randn(1))
    h.expect_fail(cg, None, torch.randn(2, 8), torch.randn(1))


def test_shape_guard_operands_of_floordiv_and_mod_keep_their_products(h):
    """A view's guards from a ShapeEnv hold products inside // and %: ``Mod(s0*s1*s2,
    2*s0*(s2//2))``. Printed bare, Python read ``a % 2*s0*...`` as ``(a % 2)*s0*...``, so the
    check failed on the very sizes it was made for (a recompile per sequence length). The fast
    check must agree with sympy's own evaluation of the relation for every size."""
    from torch.utils._sympy.functions import FloorDiv

    s0, s1, s2 = sympy.symbols("s0 s1 s2", integer=True, positive=True)
    syms = {s0: (X, 0), s1: (X, 1), s2: (X, 2)}
    half = FloorDiv(s2, 2)
    relations = [
        sympy.Eq(sympy.Mod(s0 * s2 * s1, 2 * s0 * half), 0),
        sympy.Eq(FloorDiv(s2 * s1, 2 * half), s1),
        sympy.Eq(s0 * s2 * s1, 2 * s0 * half * FloorDiv(s2 * s1, 2 * half)),
        sympy.Eq(sympy.Mod(s1 + 1, s2 - 1), 0),
    ]
    y = torch.randn(1)
    for rel in relations:
        cg = h.build(f, [ShapeGuard(rel, syms)])
        for sizes in [
            (2, 8, 8),
            (2, 12, 8),
            (3, 24, 8),
            (2, 5, 7),
            (4, 9, 3),
            (2, 7, 6),
            (1, 3, 5),
        ]:
            holds = bool(rel.xreplace({s: sympy.Integer(v) for s, v in zip((s0, s1, s2), sizes)}))
            x = torch.randn(*sizes)
            if holds:
                h.expect_pass(cg, x, y)
            else:
                h.expect_fail(cg, None, x, y)


def test_shape_guard_needs_every_symbol():
    s0, s1 = sympy.symbols("s0 s1")
    try:
        ShapeGuard(sympy.Eq(s0, s1), {s0: (X, 0)})
    except ValueError as exc:
        assert "s1" in str(exc)
    else:
        raise AssertionError("a ShapeGuard with an unbound symbol must be rejected")


def test_storage_alias_groups(h):
    from torchkiln_guards import StorageAliasGroups

    def f(x, y, z):
        return x + y + z

    srcs = [LocalSource("x"), LocalSource("y"), LocalSource("z")]
    base = torch.randn(4, 4)
    # y is a view of x, z apart
    cg = h.build(f, [StorageAliasGroups.from_tensors(srcs, [base, base[0], torch.randn(4)])])
    other = torch.randn(4, 4)
    h.expect_pass(cg, other, other.t(), torch.randn(4))
    h.expect_fail(
        cg,
        "L['y'] shares a storage with: expected L['x'], got no earlier input",
        other,
        torch.randn(4),
        torch.randn(4),
    )
    h.expect_fail(
        cg,
        "L['z'] shares a storage with: expected no earlier input, got L['x']",
        other,
        other[1],
        other[2],
    )
    # nothing shared: any sharing fails, including overlapping slices of one buffer
    cg = h.build(
        f, [StorageAliasGroups.from_tensors(srcs, [torch.randn(3), torch.randn(3), torch.randn(3)])]
    )
    buf = torch.randn(9)
    h.expect_pass(cg, buf[:3], torch.randn(3), torch.randn(3))
    h.expect_fail(
        cg,
        "L['y'] shares a storage with: expected no earlier input, got L['x']",
        buf[:3],
        buf[2:5],
        torch.randn(3),
    )


def test_storage_alias_groups_of_two(h):
    from torchkiln_guards import StorageAliasGroups

    def f(x, y):
        return x + y

    srcs = [LocalSource("x"), LocalSource("y")]
    base = torch.randn(3, 3)
    shared = h.build(f, [StorageAliasGroups.from_tensors(srcs, [base, base.t()])])
    apart = h.build(f, [StorageAliasGroups.from_tensors(srcs, [base, torch.randn(3, 3)])])
    other = torch.randn(3, 3)
    h.expect_pass(shared, other, other[1:])
    h.expect_fail(
        shared,
        "L['y'] shares a storage with: expected L['x'], got no earlier input",
        other,
        torch.randn(3),
    )
    h.expect_pass(apart, other, torch.randn(3))
    h.expect_fail(apart, None, other, other)


def test_shape_guard_over_a_stride(h):
    """A dynamic input sliced with a step has a stride symbol no size shows: the guard reads it."""
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    cg = h.build(f, [ShapeGuard(sympy.Ne(s0, s1), {s0: (X, 0, "stride"), s1: (X, 1)})])
    h.expect_pass(cg, torch.randn(4, 6)[:, ::2], torch.randn(1))  # stride 6, size 3
    h.expect_fail(
        cg,
        "Ne(L['x'].stride()[0], L['x'].size()[1]): expected True, got False "
        "[L['x'].stride()[0]=3, L['x'].size()[1]=3]",
        torch.randn(4, 3),
        torch.randn(1),
    )
