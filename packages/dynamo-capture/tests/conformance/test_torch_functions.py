"""torch.* functions and torch.nn.functional.* calls, including factories and multi-output ops."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _conformance_harness import Program, ids, randn, run_program, xy34


def pos():
    return (randn(3, 4).abs() + 0.1,)


def bchw():
    return (randn(2, 3, 6, 6),)


def attn():
    return (randn(2, 2, 5, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8))


def t_add_mul_sub_div(x, y):
    return torch.div(torch.sub(torch.mul(torch.add(x, y), 2), y), 3)


def t_unary_math(x):
    return torch.exp(torch.sin(x)) + torch.cos(x) + torch.tanh(x) + torch.sigmoid(x)


def t_log_sqrt(x):
    return torch.log(x) + torch.sqrt(x) + torch.rsqrt(x) + torch.log1p(x)


def t_reductions(x):
    return torch.sum(x), torch.mean(x, dim=1), torch.amax(x, dim=0), torch.prod(x + 1, dim=1)


def t_max_with_dim(x):
    values, indices = torch.max(x, dim=1)
    return values, indices


def t_topk_sort(x):
    v, i = torch.topk(x, 2, dim=-1)
    s, j = torch.sort(x, dim=0, descending=True)
    return v, i, s, j


def t_argmax_argmin(x):
    return torch.argmax(x, dim=1), torch.argmin(x)


def t_cat_stack(x, y):
    return torch.cat([x, y], dim=0), torch.stack((x, y), dim=1)


def t_split_chunk(x):
    a, b = torch.split(x, 2, dim=1)
    c, d = torch.chunk(x, 2, dim=1)
    return a + c, b * d


def t_reshape_permute(x):
    return torch.permute(torch.reshape(x, (2, 6)), (1, 0))


def t_transpose_flatten(x):
    return torch.flatten(torch.transpose(x, 0, 1))


def t_squeeze_unsqueeze(x):
    return torch.squeeze(torch.unsqueeze(x, 0), 0) + torch.unsqueeze(x, -1).squeeze(-1)


def t_where_clamp(x):
    return torch.where(x > 0, x, -x), torch.clamp(x, -0.5, 0.5)


def t_matmul_bmm_mm(x):
    a = torch.mm(x, x.t())
    b = torch.bmm(x.unsqueeze(0), x.t().unsqueeze(0))
    return torch.matmul(a, a) + b[0]


def t_einsum(x, y):
    return torch.einsum("ij,kj->ik", x, y)


def t_zeros_ones_full(x):
    return x + torch.zeros(3, 4) + torch.ones(4) + torch.full((3, 1), 2.5)


def t_like_factories(x):
    return (
        torch.zeros_like(x)
        + torch.ones_like(x) * 2
        + torch.full_like(x, 3.0)
        + torch.empty_like(x).fill_(1.0)
    )


def t_arange_linspace(x):
    return x + torch.arange(4) + torch.linspace(0, 1, 4) + torch.arange(0, 8, 2)


def t_eye_tril_triu(x):
    m = torch.eye(4)
    return torch.tril(x @ m) + torch.triu(x @ m, diagonal=1)


def t_tensor_constant(x):
    return x * torch.tensor([1.0, 2.0, 3.0, 4.0])


def t_scalar_tensor_from_shape(x):
    return x / torch.tensor(x.shape[1], dtype=torch.float32)


def t_gather_scatter(x, idx):
    g = torch.gather(x, 1, idx)
    s = torch.zeros(3, 4).scatter(1, idx, g)
    return g, s


def t_index_select_masked_fill(x):
    idx = torch.tensor([0, 2])
    return torch.index_select(x, 0, idx), x.masked_fill(x < 0, 0.0)


def t_cumsum_flip_roll(x):
    return torch.cumsum(x, dim=1) + torch.flip(x, dims=[0]) + torch.roll(x, 1, 1)


def t_norm_dist(x, y):
    return torch.norm(x, dim=1), torch.cdist(x, y)


def t_dtype_conversion(x):
    return x.to(torch.float64), torch.round(x * 10).to(torch.int64)


def t_softmax_logsoftmax(x):
    return torch.softmax(x, dim=-1), torch.log_softmax(x, dim=0)


def t_baddbmm_addmm(x, y):
    return torch.addmm(torch.ones(3, 3), x, y.t(), beta=0.5, alpha=2.0)


def t_outer_diag(x):
    v = x[0]
    return torch.outer(v, v) + torch.diag(v)


def t_broadcast_expand(x):
    return torch.broadcast_to(x[:, :1], (3, 4)) + x[:1].expand(3, 4)


def t_lerp_addcmul(x, y):
    return torch.lerp(x, y, 0.3) + torch.addcmul(x, x, y, value=0.5)


def t_isnan_nan_to_num(x):
    y = x / (x - x)
    return torch.nan_to_num(y, nan=0.0, posinf=1.0, neginf=-1.0), torch.isnan(y)


def t_logical_ops(x, y):
    return (
        torch.logical_and(x > 0, y > 0),
        torch.logical_not(x > 0),
        torch.any(x > 2),
        torch.all(x > -5),
    )


def t_minimum_maximum(x, y):
    return torch.minimum(x, y) + torch.maximum(x, y)


def t_erf_pow(x):
    return torch.erf(x) + torch.pow(x, 2) + torch.square(x)


def t_unbind_meshgrid(x):
    a, b = torch.meshgrid(torch.arange(3.0), torch.arange(4.0), indexing="ij")
    return x + a * b


def t_var_std(x):
    return torch.var(x, dim=1), torch.std(x, dim=0, unbiased=False), torch.var_mean(x, dim=1)


def t_dtype_promotion(x):
    i = torch.arange(4)
    return x + i, i * 2.5, (i > 1) + i


def f_relu_family(x):
    return (
        F.relu(x)
        + F.leaky_relu(x, 0.1)
        + F.elu(x)
        + F.silu(x)
        + F.gelu(x)
        + F.gelu(x, approximate="tanh")
    )


def f_softplus_hardtanh(x):
    return F.softplus(x) + F.hardtanh(x) + F.relu6(x) + F.hardswish(x) + F.mish(x)


def f_softmax_dim(x):
    return F.softmax(x, dim=-1) * F.log_softmax(x, dim=1)


def f_linear_no_bias(x, y):
    return F.linear(x, y)


def f_layer_norm(x):
    return F.layer_norm(x, (4,), torch.ones(4), torch.zeros(4), eps=1e-5)


def f_normalize(x):
    return F.normalize(x, p=2.0, dim=-1)


def f_dropout_eval(x):
    return F.dropout(x, p=0.5, training=False)


def f_conv2d(x):
    w = torch.ones(4, 3, 3, 3) / 27
    return F.conv2d(x, w, padding=1)


def f_pooling(x):
    return F.max_pool2d(x, 2), F.avg_pool2d(x, 3, stride=1), F.adaptive_avg_pool2d(x, (2, 2))


def f_interpolate(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest")


def f_pad(x):
    return F.pad(x, (1, 2, 0, 1), value=0.5)


def f_one_hot_embedding(idx):
    table = torch.arange(40.0).reshape(10, 4)
    return F.embedding(idx, table), F.one_hot(idx, 10)


def f_cross_entropy(x, target):
    return F.cross_entropy(x, target), F.nll_loss(F.log_softmax(x, -1), target)


def f_mse_l1(x, y):
    return F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"), F.smooth_l1_loss(x, y)


def f_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def f_sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def f_sdpa_mask(q, k, v):
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def f_cosine_similarity(x, y):
    return F.cosine_similarity(x, y, dim=1)


def f_glu_logsigmoid(x):
    return F.glu(x, dim=-1), F.logsigmoid(x)


def f_group_batch_norm(x):
    gn = F.group_norm(x, 1)
    bn = F.batch_norm(x, torch.zeros(3), torch.ones(3), training=False)
    return gn, bn


def t_strided_factory_written(x):
    # torch.empty_strided is not in the usual factory list: it must still be made per call
    b = torch.empty_strided((3, 4), (1, 3))
    b.copy_(x)
    return b * 2, b.stride()


def t_window_logspace_factories(x):
    return x * torch.hann_window(4) + torch.logspace(0, 1, 4), torch.range(0, 2)


PROGRAMS = [
    Program(t_strided_factory_written),
    Program(t_window_logspace_factories),
    Program(t_add_mul_sub_div, xy34),
    Program(t_unary_math),
    Program(t_log_sqrt, pos),
    Program(t_reductions),
    Program(t_max_with_dim),
    Program(t_topk_sort),
    Program(t_argmax_argmin),
    Program(t_cat_stack, xy34),
    Program(t_split_chunk),
    Program(t_reshape_permute),
    Program(t_transpose_flatten),
    Program(t_squeeze_unsqueeze),
    Program(t_where_clamp),
    Program(t_matmul_bmm_mm, rtol=1e-4, atol=1e-4),
    Program(t_einsum, xy34),
    Program(t_zeros_ones_full),
    Program(t_like_factories),
    Program(t_arange_linspace),
    Program(t_eye_tril_triu),
    Program(t_tensor_constant),
    Program(t_scalar_tensor_from_shape),
    Program(t_gather_scatter, lambda: (randn(3, 4), torch.randint(0, 4, (3, 2)))),
    Program(t_index_select_masked_fill),
    Program(t_cumsum_flip_roll),
    Program(t_norm_dist, xy34, rtol=1e-4, atol=1e-4),
    Program(t_dtype_conversion),
    Program(t_softmax_logsoftmax),
    Program(t_baddbmm_addmm, xy34),
    Program(t_outer_diag),
    Program(t_broadcast_expand),
    Program(t_lerp_addcmul, xy34),
    Program(t_isnan_nan_to_num),
    Program(t_logical_ops, xy34),
    Program(t_minimum_maximum, xy34),
    Program(t_erf_pow),
    Program(t_unbind_meshgrid),
    Program(t_var_std),
    Program(t_dtype_promotion),
    Program(f_relu_family),
    Program(f_softplus_hardtanh),
    Program(f_softmax_dim),
    Program(f_linear_no_bias, lambda: (randn(3, 4), randn(5, 4))),
    Program(f_layer_norm),
    Program(f_normalize),
    Program(f_dropout_eval),
    Program(f_conv2d, bchw),
    Program(f_pooling, bchw),
    Program(f_interpolate, bchw),
    Program(f_pad, bchw),
    Program(f_one_hot_embedding, lambda: (torch.randint(0, 10, (2, 5)),)),
    Program(f_cross_entropy, lambda: (randn(6, 5), torch.randint(0, 5, (6,)))),
    Program(f_mse_l1, xy34),
    Program(f_sdpa, attn, rtol=1e-4, atol=1e-5),
    Program(f_sdpa_causal, attn, rtol=1e-4, atol=1e-5),
    Program(f_sdpa_mask, attn, rtol=1e-4, atol=1e-5),
    Program(f_cosine_similarity, xy34),
    Program(f_glu_logsigmoid),
    Program(f_group_batch_norm, bchw),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
