"""The generated extern callables (wrapper.make_extern): results relaid out into the layout the
kernels after the call expect, data-dependent output sizes refused, results flattened."""

from __future__ import annotations

import pytest
import sympy
import torch
import torchkiln_loop_ir as L
from torchkiln_loop_ir.backend import BufferRef, BufferSpec, ExternCall
from torchkiln_loop_ir.wrapper import make_extern

aten = torch.ops.aten


def _spec(size, stride):
    return BufferSpec(
        "out",
        torch.float32,
        torch.device("cpu"),
        tuple(map(sympy.sympify, size)),
        tuple(map(sympy.sympify, stride)),
    )


def test_result_with_other_strides_is_copied_into_the_expected_layout():
    a, b = torch.randn(8, 5), torch.randn(5, 4)
    step = ExternCall(aten.mm.default, (BufferRef("a"), BufferRef("b")), {}, ("out",))
    # the kernels after the call were generated for a column-major result
    (out,) = make_extern(step, [_spec((8, 4), (1, 8))])(a, b)
    assert out.stride() == (1, 8)
    torch.testing.assert_close(out, a @ b)


def test_result_in_the_expected_layout_is_not_copied():
    a, b = torch.randn(8, 5), torch.randn(5, 4)
    step = ExternCall(aten.mm.default, (BufferRef("a"), BufferRef("b")), {}, ("out",))
    call = make_extern(step, [_spec((8, 4), (4, 1))])
    (out,) = call(a, b)
    assert out.stride() == (4, 1)
    torch.testing.assert_close(out, a @ b)
    (plain,) = make_extern(step)(a, b)  # no layout asked for
    torch.testing.assert_close(plain, a @ b)


def test_single_element_result_keeps_its_strides():
    a, b = torch.randn(1, 5), torch.randn(5, 1)
    step = ExternCall(aten.mm.default, (BufferRef("a"), BufferRef("b")), {}, ("out",))
    (out,) = make_extern(step, [_spec((1, 1), (7, 7))])(
        a, b
    )  # strides of one element do not matter
    torch.testing.assert_close(out, a @ b)


def test_constant_and_symbolic_arguments():
    x = torch.randn(6, 4)
    step = ExternCall(
        aten.sum.dim_IntList, (BufferRef("x"), [sympy.Integer(1)]), {"keepdim": True}, ("out",)
    )
    (out,) = make_extern(step, [_spec((6, 1), (1, 1))])(x)
    torch.testing.assert_close(out, x.sum(1, keepdim=True))
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    step = ExternCall(
        aten.new_zeros.default, (BufferRef("x"), [s0, sympy.Integer(3)]), {}, ("out",)
    )
    (out,) = make_extern(step)(x, 5)
    assert out.shape == (5, 3) and not out.any()


def test_multiple_outputs_each_relaid_out():
    x = torch.randn(6, 4)
    step = ExternCall(
        aten.var_mean.correction, (BufferRef("x"), [0]), {"keepdim": True}, ("var", "mean")
    )
    var, mean = make_extern(step, [None, _spec((1, 4), (1, 1))])(x)
    ref_var, ref_mean = torch.var_mean(x, 0, keepdim=True)
    torch.testing.assert_close(var, ref_var)
    torch.testing.assert_close(mean, ref_mean)
    t = torch.randn(3, 5)
    step = ExternCall(aten.sort.default, (BufferRef("t"),), {}, ("values", "indices"))
    values, indices = make_extern(step, [_spec((3, 5), (1, 3)), None])(t)
    ref = torch.sort(t)
    assert values.stride() == (1, 3)
    torch.testing.assert_close(values, ref.values)
    assert torch.equal(indices, ref.indices)


def test_a_python_callable_result_is_flattened_and_counted():
    x = torch.randn(4, 3)
    step = ExternCall(lambda t: [t + 1, (t * 2,)], (BufferRef("x"),), {}, ("a", "b"))
    a, b = make_extern(step, [None, _spec((4, 3), (1, 4))])(x)
    torch.testing.assert_close(a, x + 1)
    assert b.stride() == (1, 4)
    torch.testing.assert_close(b, x * 2)
    wrong = ExternCall(lambda t: (t, t, t), (BufferRef("x"),), {}, ("a", "b"))
    with pytest.raises(RuntimeError, match="returned 3 values, expected 2"):
        make_extern(wrong)(x)


def test_fallback_of_data_dependent_size_is_refused():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    step = ExternCall(aten.nonzero.default, (BufferRef("x"),), {}, ("out",), kind="fallback")
    call = make_extern(
        step,
        [
            BufferSpec(
                "out",
                torch.int64,
                torch.device("cpu"),
                (sympy.Integer(2), sympy.Integer(1)),
                (sympy.Integer(1), sympy.Integer(1)),
            )
        ],
    )
    (out,) = call(x)
    assert torch.equal(out, torch.nonzero(x))
    with pytest.raises(L.OutputShapeChanged, match="depends on the data"):
        call(torch.tensor([1.0, 1.0, 1.0, 0.0]))


def test_symbolic_layout_relaid_out_from_the_result_size():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    step = ExternCall(aten.mm.default, (BufferRef("a"), BufferRef("b")), {}, ("out",))
    call = make_extern(step, [_spec((s0, 3), (1, s0))])
    (out,) = call(a, b)
    assert out.stride() == (1, 7)
    torch.testing.assert_close(out, a @ b)


def test_scalar_result_comes_back_as_one_value():
    x = torch.tensor([3.5])
    step = ExternCall(
        aten._local_scalar_dense.default, (BufferRef("x"),), {}, ("",), scalars=("u0",)
    )
    (value,) = make_extern(step, [None])(x)
    assert value == 3.5 and isinstance(value, float)


def test_python_binding_only_where_it_means_the_one_overload():
    from torchkiln_loop_ir.wrapper import python_binding

    assert python_binding(aten.convolution.default) is torch._C._VariableFunctions.convolution
    # other overloads besides out=: the binding might resolve elsewhere
    assert python_binding(aten.mm.default) is None  # mm.dtype
    assert python_binding(aten.add.Tensor) is None
    assert python_binding(aten.convolution.out) is None
    assert python_binding(aten.convolution_backward.default) is None  # no binding at all


def test_a_convolution_extern_through_its_binding_equals_eager():
    """The extern call of ``aten.convolution`` through ``torch.convolution``, keyword
    arguments and a tensor bias included, equals the operator's own result; a graph's
    convolution backward (no binding) still goes through the operator."""
    x, w, b = torch.randn(2, 4, 9, 9), torch.randn(6, 4, 3, 3), torch.randn(6)
    args = (BufferRef("x"), BufferRef("w"), BufferRef("b"), [2, 2], [1, 1], [1, 1], False)
    step = ExternCall(
        aten.convolution.default, args, {"output_padding": [0, 0], "groups": 1}, ("y",)
    )
    (y,) = make_extern(step)(x, w, b)
    torch.testing.assert_close(
        y, aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    )
    g = torch.randn_like(y)
    back = ExternCall(
        aten.convolution_backward.default,
        (
            BufferRef("g"),
            BufferRef("x"),
            BufferRef("w"),
            [6],
            [2, 2],
            [1, 1],
            [1, 1],
            False,
            [0, 0],
            1,
            [True, True, True],
        ),
        {},
        ("gx", "gw", "gb"),
    )
    got = make_extern(back)(g, x, w)
    expected = aten.convolution_backward.default(
        g, x, w, [6], [2, 2], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]
    )
    for a, e in zip(got, expected):
        torch.testing.assert_close(a, e)
