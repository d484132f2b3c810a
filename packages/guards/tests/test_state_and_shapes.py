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
        h.expect_fail(cg, "torch.get_default_dtype(): expected torch.float32, got torch.float64", x, y)
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
            inside, "torch.get_autocast_dtype('cpu'): expected torch.bfloat16, got torch.float16", x, y
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
    h.expect_fail(cg, "L['y'] shares a storage with: expected L['x'], got no earlier input",
                  other, torch.randn(4), torch.randn(4))
    h.expect_fail(cg, "L['z'] shares a storage with: expected no earlier input, got L['x']",
                  other, other[1], other[2])
    # nothing shared: any sharing fails, including overlapping slices of one buffer
    cg = h.build(f, [StorageAliasGroups.from_tensors(srcs, [torch.randn(3), torch.randn(3), torch.randn(3)])])
    buf = torch.randn(9)
    h.expect_pass(cg, buf[:3], torch.randn(3), torch.randn(3))
    h.expect_fail(cg, "L['y'] shares a storage with: expected no earlier input, got L['x']",
                  buf[:3], buf[2:5], torch.randn(3))


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
    h.expect_fail(shared, "L['y'] shares a storage with: expected L['x'], got no earlier input",
                  other, torch.randn(3))
    h.expect_pass(apart, other, torch.randn(3))
    h.expect_fail(apart, None, other, other)
