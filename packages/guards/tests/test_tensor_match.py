"""TensorMatch: a passing tensor passes, each kind of change fails with a reason that reads right."""

import pytest
import torch
from torchkiln_guards import LocalSource, TensorMatch

X = LocalSource("x")


def f(x):
    return (x * 2 + 1).relu().sum()


def _cg(h, t, **kw):
    return h.build(f, [TensorMatch.from_tensor(X, t, **kw)])


def test_same_properties_fresh_values_pass(h):
    x = torch.randn(4, 8)
    cg = _cg(h, x)
    y = torch.randn(4, 8)
    h.expect_pass(cg, y)
    torch.testing.assert_close(f(y), (y * 2 + 1).relu().sum())


@pytest.mark.parametrize(
    "make, reason",
    [
        (
            lambda: torch.randn(4, 8, dtype=torch.float16),
            "L['x'].dtype: expected torch.float32, got torch.float16",
        ),
        (lambda: torch.randn(5, 8), "L['x'].size()[0]: expected 4, got 5"),
        (lambda: torch.randn(4, 9), "L['x'].size()[1]: expected 8, got 9"),
        (lambda: torch.randn(4, 8, 1), "L['x'].dim(): expected 2, got 3"),
        (lambda: torch.randn(8, 4).t(), "L['x'].stride()[0]: expected 8, got 1"),
        (lambda: torch.randn(33)[1:].view(4, 8), "L['x'].storage_offset(): expected 0, got 1"),
        (
            lambda: torch.randn(4, 8, requires_grad=True),
            "L['x'].requires_grad: expected False, got True",
        ),
        (
            lambda: torch.randn(4, 8, device="meta"),
            "L['x'].device: expected torch.device('cpu'), got torch.device('meta')",
        ),
        (
            lambda: torch.nn.Parameter(torch.randn(4, 8)),
            "type(L['x']): expected torch.Tensor, got torch.nn.Parameter",
        ),
        (lambda: [1.0] * 32, "type(L['x']): expected torch.Tensor, got list"),
        (lambda: None, "type(L['x']): expected torch.Tensor, got NoneType"),
    ],
)
def test_changes_fail_with_reason(h, make, reason):
    cg = _cg(h, torch.randn(4, 8))
    h.expect_fail(cg, reason, make())


def test_parameter_and_subclass_exact_type(h):
    class MyTensor(torch.Tensor):
        pass

    p = torch.nn.Parameter(torch.randn(3))
    cg = _cg(h, p)
    h.expect_pass(cg, torch.nn.Parameter(torch.randn(3)))
    h.expect_fail(
        cg,
        "type(L['x']): expected torch.nn.Parameter, got torch.Tensor",
        torch.randn(3, requires_grad=True),
    )
    sub = torch.randn(3).as_subclass(MyTensor)
    cg = _cg(h, sub)
    assert cg.guards[0].dispatch_keys is not None  # subclasses pin their dispatch keys
    h.expect_pass(cg, torch.randn(3).as_subclass(MyTensor))
    failure = h.expect_fail(cg, None, torch.randn(3))
    assert failure.expr == "type(L['x'])"


def test_complex_conj_bit_is_caught_by_dispatch_keys(h):
    z = torch.randn(4, dtype=torch.complex64)
    cg = _cg(h, z)
    h.expect_pass(cg, torch.randn(4, dtype=torch.complex64))
    failure = h.expect_fail(cg, None, torch.randn(4, dtype=torch.complex64).conj())
    assert failure.expr == "torch._C._dispatch_keys(L['x'])"


def test_dynamic_dims_are_not_pinned(h):
    x = torch.randn(4, 8)
    cg = _cg(h, x, dynamic_dims={0})
    guard = cg.guards[0]
    assert guard.sizes == (None, 8) and guard.strides == (8, 1)
    h.expect_pass(cg, torch.randn(7, 8))
    h.expect_fail(cg, "L['x'].size()[1]: expected 8, got 3", torch.randn(7, 3))
    # a dynamic inner dim unpins the outer stride; contiguity is checked instead
    cg = _cg(h, x, dynamic_dims={1})
    assert cg.guards[0].strides == (None, 1)
    h.expect_pass(cg, torch.randn(4, 5))
    h.expect_fail(cg, "L['x'].stride()[1]: expected 1, got 4", torch.randn(5, 4).t())


def test_from_fake_tensor_with_symbolic_sizes(h):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    fake = mode.from_tensor(torch.randn(4, 8), symbolic_context=None)
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    fake = mode.from_tensor(torch.randn(4, 8), symbolic_context=ctx)
    cg = _cg(h, fake)
    assert cg.guards[0].sizes == (None, 8)
    h.expect_pass(cg, torch.randn(11, 8))
    h.expect_fail(cg, "L['x'].size()[1]: expected 8, got 2", torch.randn(11, 2))


def test_size_one_dims_ignore_their_stride(h):
    cg = _cg(h, torch.randn(1, 8))
    odd = torch.randn(8, 1).t()  # shape (1, 8), strides (1, 1): same memory walk
    assert odd.stride() == (1, 1)
    h.expect_pass(cg, odd)
    torch.testing.assert_close(f(odd), (odd * 2 + 1).relu().sum())
    h.expect_fail(cg, "L['x'].stride()[1]: expected 1, got 2", torch.randn(1, 16)[:, ::2])
