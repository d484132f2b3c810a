"""Tensor methods and attributes: shape, size(), dim(), ndim, dtype, device, T, mT, views, in-place."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, xy34


def b234():
    return (randn(2, 3, 4),)


def m_shape_attr(x):
    n, m = x.shape
    return x.reshape(m, n)


def m_size_call(x):
    return x.view(x.size(0) * x.size(1)) + x.size()[1]


def m_size_negative(x):
    return x.new_zeros(x.size(-1)) + x[0]


def m_size_keyword(x):
    return x.new_ones(x.size(dim=1)) * x.size(dim=0) + x[0]


def m_mH_conj(x):
    return x.mH @ x, x.conj()


def m_is_cuda_is_sparse(x):
    return x + 1 if not x.is_cuda and not x.is_sparse else x - 1


def m_dim_ndim(x):
    return x * x.dim() + x.ndim


def m_numel_nelement(x):
    return x / x.numel() + x.nelement()


def m_dtype_attr_to(x):
    return x.to(x.dtype) * 2, torch.zeros(2, dtype=x.dtype)


def m_device_attr(x):
    return torch.ones(3, 4, device=x.device) + x


def m_T(x):
    return x.T @ x


def m_mT(x):
    return x.mT @ x


def m_is_floating_point(x):
    return x * 2 if x.is_floating_point() else x


def m_is_contiguous(x):
    y = x.t()
    return y.contiguous() if not y.is_contiguous() else y


def m_view_reshape(x):
    return x.view(4, 3).reshape(2, 6).view(-1)


def m_permute_transpose(x):
    return x.permute(2, 0, 1).transpose(1, 2).contiguous()


def m_unsqueeze_squeeze_expand(x):
    return x.unsqueeze(1).expand(3, 2, 4).squeeze()


def m_flatten_unflatten(x):
    return x.flatten().unflatten(0, (4, 3))


def m_repeat_tile(x):
    return x.repeat(2, 1), x.tile((1, 2))


def m_reductions(x):
    return x.sum(), x.mean(dim=0), x.max(), x.min(dim=1).values, x.std(), x.norm()


def m_sum_keepdim(x):
    return x.sum(-1, keepdim=True) / x.amax(dim=-1, keepdim=True)


def m_argmax_softmax(x):
    return x.softmax(-1).argmax(-1)


def m_clone_detach(x):
    return x.clone().detach() * 2


def m_contiguous_stride(x):
    y = x.t().contiguous()
    return y * y.stride()[0]


def m_float_long_bool(x):
    return x.long().float() + x.bool().int() + x.half().float()


def m_type_as(x, y):
    return x.type_as(y.double()) * 2


def m_new_factories(x):
    return (
        x.new_ones(2, 2),
        x.new_full((3,), 7.0),
        x.new_tensor([1.0, 2.0]),
        x.new_empty(4).fill_(0.5),
    )


def m_chunk_split_unbind(x):
    a, b = x.chunk(2, dim=1)
    c, d, e = x.unbind(0)
    return a * b, c + d + e, x.split([1, 3], dim=1)[1]


def m_masked_fill_where(x):
    return x.masked_fill(x > 0, -1.0), x.where(x > 0, 0.0)


def m_clamp_abs_neg(x):
    return x.clamp(min=-0.1).abs().neg(), x.clamp_min(0.0), x.clamp_max(0.0)


def m_pow_sqrt_exp(x):
    return x.abs().sqrt() + x.pow(2) + x.exp() + x.sigmoid() + x.tanh() + x.relu()


def m_matmul_methods(x, y):
    return x.matmul(y.t()), x.mm(y.t()), (x * y).sum(1)


def m_comparison_methods(x, y):
    return x.gt(y), x.lt(0), x.eq(x), x.ne(y), x.ge(y), x.le(y)


def m_item_free_int_from_shape(x):
    return x.new_zeros(x.shape[0], x.shape[1] * 2)


def m_inplace_add_mul(x):
    y = x.clone()
    y.add_(1.0).mul_(2.0)
    return y


def m_inplace_zero_fill(x):
    y = x.clone()
    y[1].zero_()
    y[2].fill_(3.0)
    return y


def m_inplace_clamp_relu(x):
    y = x.clone()
    y.clamp_(-0.5, 0.5)
    y.relu_()
    return y


def m_inplace_copy(x, y):
    z = torch.empty_like(x)
    z.copy_(y)
    return z + x


def m_inplace_on_view(x):
    y = x.clone()
    v = y[:, :2]
    v.mul_(10)
    return y


def m_inplace_masked_fill(x):
    y = x.clone()
    y.masked_fill_(y < 0, 0.0)
    return y


def m_index_put_method(x):
    y = x.clone()
    y[torch.tensor([0, 2])] = 1.0
    return y


def m_sort_topk_methods(x):
    return x.sort(dim=1).values, x.topk(2).indices


def m_cumsum_cumprod(x):
    return x.cumsum(0), x.cumprod(1)


def m_tril_triu(x):
    return x.tril(), x.triu(1)


def m_gather_scatter_add(x):
    idx = torch.tensor([[0, 1], [1, 2], [2, 3]])
    return x.gather(1, idx), torch.zeros(3, 4).scatter_add(1, idx, x[:, :2])


def m_narrow_select(x):
    return x.narrow(1, 1, 2), x.select(0, 1)


def m_expand_as_view_as(x, y):
    return x[:1].expand_as(y) + x.view_as(y)


def m_flip_roll(x):
    return x.flip(0), x.roll(1, dims=1)


def m_all_any(x):
    return (x > -10).all(), (x > 1).any(dim=1)


def m_dtype_itemsize_element_size(x):
    return x * x.element_size()


def m_requires_grad_attr(x):
    return x * 3 if not x.requires_grad else x


def m_shape_index_in_loop(x):
    b, s, h = x.shape
    return x.reshape(b * s, h).view(b, s, h).sum(dim=(1, 2))


def m_lerp_addcdiv(x, y):
    return x.lerp(y, 0.25) + x.addcdiv(y, y.abs() + 1, value=0.5)


def m_bitwise_methods(x):
    i = (x * 10).long()
    return i.bitwise_and(3), i.bitwise_or(4), i.remainder(3), i.fmod(3)


PROGRAMS = [
    Program(m_shape_attr),
    Program(m_size_call),
    Program(m_size_negative),
    Program(m_size_keyword),
    Program(m_mH_conj),
    Program(m_is_cuda_is_sparse),
    Program(m_dim_ndim),
    Program(m_numel_nelement),
    Program(m_dtype_attr_to),
    Program(m_device_attr),
    Program(m_T),
    Program(m_mT, b234),
    Program(m_is_floating_point),
    Program(m_is_contiguous),
    Program(m_view_reshape),
    Program(m_permute_transpose, b234),
    Program(m_unsqueeze_squeeze_expand),
    Program(m_flatten_unflatten),
    Program(m_repeat_tile),
    Program(m_reductions),
    Program(m_sum_keepdim),
    Program(m_argmax_softmax),
    Program(m_clone_detach),
    Program(m_contiguous_stride),
    Program(m_float_long_bool, rtol=1e-3, atol=1e-3),
    Program(m_type_as, xy34),
    Program(m_new_factories),
    Program(m_chunk_split_unbind),
    Program(m_masked_fill_where),
    Program(m_clamp_abs_neg),
    Program(m_pow_sqrt_exp),
    Program(m_matmul_methods, xy34),
    Program(m_comparison_methods, xy34),
    Program(m_item_free_int_from_shape),
    Program(m_inplace_add_mul),
    Program(m_inplace_zero_fill),
    Program(m_inplace_clamp_relu),
    Program(m_inplace_copy, xy34),
    Program(m_inplace_on_view),
    Program(m_inplace_masked_fill),
    Program(m_index_put_method),
    Program(m_sort_topk_methods),
    Program(m_cumsum_cumprod),
    Program(m_tril_triu),
    Program(m_gather_scatter_add),
    Program(m_narrow_select),
    Program(m_expand_as_view_as, xy34),
    Program(m_flip_roll),
    Program(m_all_any),
    Program(m_dtype_itemsize_element_size),
    Program(m_requires_grad_attr),
    Program(m_shape_index_in_loop, b234),
    Program(m_lerp_addcdiv, xy34),
    Program(m_bitwise_methods),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
