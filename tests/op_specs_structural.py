"""The op table, structural families: reductions, views and layout, indexing, pooling, backward
kernels run as named externs, extern kernels with epilogues, random ops."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torchkiln_loop_ir  # noqa: F401  (defines torchkiln::conv_direct and conv_taps)
from op_specs_base import (
    _SDPA_KERNELS,
    ALL,
    BF16,
    BOOL,
    F16,
    F32,
    FLOATS,
    I32,
    I64,
    INTS,
    AnyOf,
    aten,
    make,
    reduction_cases,
    spec,
)

# reductions
spec(
    "sum_prod_mean",
    lambda x: (
        x.sum(-1),
        x.sum(0, keepdim=True),
        x.sum(),
        x.mean(-1),
        x.mean(),
        (x * 0.5 + 1).prod(-1),
        (x * 0.5 + 1).prod(),
    ),
    reduction_cases(lambda t: t * 0.5),
    (
        aten.sum.dim_IntList,
        aten.sum.default,
        aten.mean.dim,
        aten.mean.default,
        aten.prod.dim_int,
        aten.prod.default,
    ),
    tol={F32: (1e-5, 1e-5)},
    decompose=False,
)
spec(
    "split_reductions",
    lambda x, y: (
        x.sum(),
        x.amax(),
        x.reshape(4, -1).sum(-1),
        (x > 2).any(),
        y.var(),
        *torch.var_mean(y.reshape(2, -1), -1),
    ),
    lambda dt: [(make((2**17,), dt), make((2**17,), dt, lambda t: 1000 + t))],
    (
        aten.sum.default,
        aten.amax.default,
        aten.sum.dim_IntList,
        aten.any.default,
        aten.var.correction,
        aten.var_mean.correction,
    ),
    dtypes=(F32,),
    tol={F32: (2e-5, 1e-3)},
    decompose=False,
)
spec(
    "cumsum",
    lambda x: (x.cumsum(-1), x.cumsum(0), torch.cumsum(x, -1, dtype=F32) * 2),
    lambda dt: [
        (make((7, 257), dt),),
        (make((33, 7), dt, transposed=True),),
        (make((1, 1), dt),),
        (make((3, 5, 7), dt, step=2),),
    ],
    (aten.cumsum.default,),
    dtypes=ALL,
    tol={F32: (1e-5, 2e-5), BF16: (1.6e-2, 0.3), F16: (2e-3, 0.05)},
    decompose=False,
)
spec(
    "flip",
    lambda x: (torch.flip(x, (-1,)), torch.flip(x, (0, -1)) * 2, x.flip(0).sum(0)),
    lambda dt: [
        (make((7, 5), dt),),
        (make((6, 9), dt, transposed=True),),
        (make((3, 4, 5), dt, step=2),),
        (make((1, 1), dt),),
    ],
    (aten.flip.default,),
    dtypes=ALL,
)
spec(
    "sum_prod_int",
    lambda x: (x.sum(-1), x.sum(), (x % 3).prod(-1), x.sum(-1, dtype=F32)),
    reduction_cases(),
    (aten.sum.dim_IntList, aten.sum.default, aten.prod.dim_int),
    dtypes=INTS + (BOOL,),
    decompose=False,
)
spec(
    "amax_amin_max_min",
    lambda x: (x.amax(-1), x.amin(0, keepdim=True), x.max(), x.min(), x.amax((0, -1))),
    reduction_cases(),
    (aten.amax.default, aten.amin.default, aten.max.default, aten.min.default),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "argmax_argmin_max_dim",
    lambda x: (x.argmax(-1), x.argmin(0), x.argmax(), *x.max(-1), *x.min(0, keepdim=True)),
    reduction_cases(),
    (aten.argmax.default, aten.argmin.default, aten.max.dim, aten.min.dim),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "argmax_ties",
    lambda x: (x.argmax(-1), x.argmin(-1), x.argmax(0), x.argmin(), *x.max(-1)),
    lambda dt: [
        (
            make(
                (7, 257),
                dt,
                lambda t: (t > 0.8).to(t.dtype) * 3 - (t < -0.8).to(t.dtype) * 3,
                low=0,
                high=2,
            ),
        ),
        (make((33, 7), dt, lambda t: t.round().clamp(-1, 1), transposed=True, low=0, high=2),),
        (lambda: torch.zeros(5, 3000).to(dt),),
    ],
    (aten.argmax.default, aten.argmin.default, aten.max.dim),
    dtypes=(F32, BF16, I64),
    kind="exact",
    decompose=False,
)
spec(
    "any_all",
    lambda x: (x.any(), x.any(-1), x.any((0, -1)), x.all(), x.all(0), x.all((0, -1))),
    reduction_cases(lambda t: (t > 1.5).to(t.dtype)),
    (aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims),
    dtypes=(F32, I64, BOOL),
    decompose=False,
)
spec(
    "var_dim",
    lambda x: (aten.var.dim(x, [-1], True, False), aten.var.dim(x, [0], False, True)),
    reduction_cases(),
    (aten.var.dim,),
    tol={F32: (2e-5, 1e-5)},
    fx=True,
)
spec(
    "var_std_var_mean",
    lambda x: (
        x.var(-1),
        torch.var(x, 0, unbiased=False, keepdim=True),
        x.std(-1),
        x.std(),
        *torch.var_mean(x, -1, correction=0),
        *torch.var_mean(x, (0, -1), keepdim=True),
    ),
    lambda dt: [
        (make((7, 257), dt),),
        (make((33, 7), dt, transposed=True),),
        (make((3, 5, 7), dt, lambda t: 1000 + t, step=2),),
        (make((2, 2000), dt, lambda t: 1000 + t),),
    ],
    (aten.var.correction, aten.std.correction, aten.var_mean.correction),
    # the 1000 + t cases: float32 near 1000 has an ulp of 6e-5, so any order of summation
    # (a GPU's tree, the CPU's sequential Welford, eager's) differs from another by ~1e-4
    tol={F32: (1e-4, 1e-4), F16: (2e-3, 1e-2), BF16: (1.6e-2, 5e-2)},
    decompose=False,
)

# views and layout
spec(
    "views",
    lambda x: (
        x.contiguous().view(-1) * 2,
        x.reshape(x.shape[-1], -1) + 1,
        x.permute(1, 0) * 2,
        x.transpose(0, 1) + 1,
        x.t() * 2,
        x[None].expand(3, -1, -1) * 1,
        x.unsqueeze(1) + 0,
        x[None, :, None].squeeze() + 0,
        x[None].squeeze(0) + 0,
        x[None, None].squeeze((0, 1)) + 0,
        x[1:, ::2] + 1,
        x[:, -3:] * 2,
        x[0] + 1,
        x[:, -1] * 2,
        aten._unsafe_view(x.contiguous() * 1, (-1,)),
        aten.alias(x) + 1,
        x.detach() * 3,
        x.clone(),
        x.as_strided((2, 2), (1, 2), 1) + 0,
    ),
    lambda dt: [(make((7, 257), dt),), (make((33, 7), dt, transposed=True),)],
    (
        aten.view.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.expand.default,
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.slice.Tensor,
        aten.select.int,
        aten._unsafe_view.default,
        aten.alias.default,
        aten.detach.default,
        aten.clone.default,
        aten.as_strided.default,
    ),
    dtypes=ALL,
    decompose=False,
)
spec(
    "as_strided_computed",
    lambda x: (
        F.adaptive_avg_pool2d(x * 2, 1).flatten(1) + 1,
        (x.transpose(1, 3) + 1).as_strided((7, 3), (2, 5), 3) * 2,
        torch.as_strided_scatter(x * 3, x[0, :2, :2, 0] - 1, (2, 2), (7, 2), 5),
        torch.as_strided_scatter(x.exp(), x[1, 0, :2, :3], (2, 3), (1, 4), 2) + 1,
    ),
    lambda dt: [
        (lambda dt=dt: torch.randn(2, 5, 3, 4).to(dt).to(memory_format=torch.channels_last),),
        (make((2, 5, 3, 4), dt),),
    ],
    # adaptive_avg_pool2d's composite kernel restrides its mean of a channels-last input with a raw
    # as_strided_; the second reads a computed value by eager's (transposed) storage order; the
    # scatters' views begin 5 and 2 elements into a contiguous value: index functions must stay
    # on non-negative numbers
    (aten.as_strided_.default, aten.as_strided.default, aten.as_strided_scatter.default),
)
spec(
    "slice_scatter",
    lambda x, s: (
        torch.slice_scatter(x, s, 1, 2, 5),
        torch.slice_scatter(x, s[:, :2], 1, 1, None, 2),
        torch.slice_scatter(x, x[-3:], 0, -3),
        torch.slice_scatter(x, x[:2], 0, 5, 100),
    ),
    lambda dt: [
        (make((7, 5), dt), make((7, 3), dt)),
        (make((7, 5), dt, transposed=True), make((7, 3), dt, transposed=True)),
    ],
    (aten.slice_scatter.default,),
    dtypes=ALL,
)
spec(
    "constant_pad_nd",
    lambda x: (
        F.pad(x, (1, 2), value=-100),
        F.pad(x, (0, 1, 2, 0)),
        F.pad(x, (-1, 2, 1, -2), value=3),
    ),
    lambda dt: [(make((7, 5), dt),), (make((7, 5), dt, transposed=True),)],
    (aten.constant_pad_nd.default,),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "views_as_written",
    lambda x: (
        aten.mul.Tensor(aten.reshape.default(x, [-1]), 2),
        aten.add.Tensor(aten.lift_fresh.default(x), 1),
        aten.mul.Tensor(aten.lift_fresh_copy.default(x), 3),
    ),
    lambda dt: [(make((7, 257), dt),), (make((33, 7), dt, transposed=True),)],
    (aten.reshape.default, aten.lift_fresh.default, aten.lift_fresh_copy.default),
    dtypes=(F32, I64),
    fx=True,
)
spec(
    "cat_split_unbind",
    lambda x, y: (
        torch.cat([x, y * 2], 0),
        torch.cat([x.t(), x.t()], 1),
        *[s * 2 for s in x.split(3, 0)],
        *[s + 1 for s in x.split_with_sizes([2, 5], 0)],
        *[s * 3 for s in x.unbind(1)[:3]],
    ),
    lambda dt: [
        (make((7, 5), dt), make((3, 5), dt)),
        (make((7, 9), dt, transposed=True), make((2, 9), dt, step=2)),
    ],
    (aten.cat.default, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int),
    dtypes=ALL,
    decompose=False,
)

# indexing
spec(
    "embedding_gather_index_select",
    lambda w, i, j: (
        F.embedding(i, w) * 2,
        torch.gather(w, 1, j),
        w.index_select(0, i.flatten()),
        w[i],
        w[:, j[0]],
    ),
    lambda dt: [
        (
            make((11, 5), dt),
            lambda: torch.randint(0, 11, (3, 4)),
            lambda: torch.randint(0, 5, (11, 3)),
        ),
        (
            make((11, 5), dt, transposed=True),
            lambda: torch.randint(0, 11, (1,)),
            lambda: torch.randint(0, 5, (11, 1)),
        ),
    ],
    (aten.embedding.default, aten.gather.default, aten.index_select.default, aten.index.Tensor),
    dtypes=FLOATS + INTS,
)


def _unique_rows(n, k, cols):
    """(k, cols) int64 indices into n rows, unique down every column (plain scatter is only
    defined without duplicates)."""
    return lambda: torch.stack([torch.randperm(n)[:k] for _ in range(cols)], 1)


spec(
    "scatter",
    lambda x, i, s, j: (
        x.scatter(0, i, s),
        x.scatter(0, i, 2.5),
        x.scatter_add(1, j, s),
        x.scatter_reduce(0, i, s, "sum"),
    ),
    lambda dt: [
        (
            make((7, 5), dt),
            _unique_rows(7, 4, 5),
            make((4, 5), dt),
            lambda: torch.randint(0, 5, (4, 5)),
        ),
        (
            make((7, 5), dt, transposed=True),
            _unique_rows(7, 1, 5),
            make((1, 5), dt),
            lambda: torch.randint(0, 5, (1, 5)),
        ),
    ],
    (aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter_reduce.two),
    # 16-bit floats accumulate in a float32 copy (loop-ir's _scatter)
    dtypes=(F32, F16, BF16, I32, I64),
    decompose=False,
)
spec(
    "index_put",
    lambda x, i, v, j, k, w, m, s: (
        torch.index_put(x, (i,), v),
        torch.index_put(x, (j,), v, accumulate=True),
        torch.index_put(x, (j, k), w, accumulate=True),
        torch.index_put(x, (m,), s),
    ),
    lambda dt: [
        (
            make((7, 5), dt),
            lambda: torch.randperm(7)[:4] - 3,
            make((4, 5), dt),
            lambda: torch.randint(-7, 7, (4,)),
            lambda: torch.randint(0, 5, (4,)),
            make((4,), dt),
            make((7,), BOOL),
            make((), dt),
        )
    ],
    (aten.index_put.default,),
    dtypes=(F32, F16, BF16, I64),
    decompose=False,
)


def _sliced_puts(x, i, j, v, w, u):
    a = x.clone()
    a[:, i] = v  # index_put(x, [None, i], v)
    b = x.clone()
    b[:, i, j] += w  # index, add, index_put(x, [None, i, j], ...)
    c = x.clone()
    c[i, :, j] = u  # non-adjacent index tensors: their shape comes first
    return a, b, c


spec(
    "index_put_sliced",
    _sliced_puts,
    lambda dt: [
        (
            make((4, 5, 6), dt),
            lambda: torch.randperm(4)[:3],
            lambda: torch.randperm(6)[:3],
            make((4, 3, 6), dt),
            make((4, 3), dt),
            make((3, 5), dt),
        ),
        (
            make((4, 5, 6), dt, step=2),
            lambda: torch.randperm(4)[:1] - 4,
            lambda: torch.randperm(6)[:1],
            make((4, 1, 6), dt),
            make((1,), dt),
            make((5,), dt),
        ),
    ],
    (aten.index_put.default,),
    dtypes=(F32, BF16, I64),
    decompose=False,
)


def fixed_count_mask(shape, count):
    """Fresh random boolean masks with ``count`` True elements: the output size of ``x[mask]``
    depends on the data, and a traced graph holds for that size only."""

    def maker():
        flat = torch.zeros(torch.Size(shape).numel(), dtype=BOOL)
        flat[torch.randperm(flat.numel())[:count]] = True
        return flat.view(shape)

    return maker


spec(
    "boolean_mask_read",
    lambda x, m: (x[m] * 2, torch.nonzero(m)),
    lambda dt: [(make((7, 5), dt), fixed_count_mask((7, 5), 13))],
    (aten.index.Tensor,),
    dtypes=(F32,),
    fallbacks=("aten.index.Tensor", "aten.nonzero"),
)

# pooling


def _images(small):
    """A batch of 3-channel 9x11 images, then one ``small`` image."""
    return lambda dt: [(make((2, 3, 9, 11), dt),), (make(small, dt),)]


spec(
    "max_pool2d",
    lambda x: F.max_pool2d_with_indices(x, 3, 2, 1),
    _images((1, 1, 3, 3)),
    (aten.max_pool2d_with_indices.default,),
    dtypes=FLOATS,
    decompose=False,
)

spec(
    "avg_pool2d",
    lambda x: (
        F.avg_pool2d(x, 3, 2, 1),
        F.avg_pool2d(x, 2, ceil_mode=True),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False, ceil_mode=True),
        F.avg_pool2d(x, (2, 3), divisor_override=4),
    ),
    _images((1, 1, 4, 5)),
    (aten.avg_pool2d.default,),
    dtypes=FLOATS,
    decompose=False,
)
spec(
    "copy",
    lambda d, s: (aten.copy(d, s) * 2, aten.copy(d, s[:1]).sin()),
    lambda dt: [(make((5, 7), dt), make((5, 7), dt)), (make((3, 4), dt), make((3, 4), F32))],
    (aten.copy.default,),
    dtypes=FLOATS,
    decompose=False,
)

# backward kernels: convolution and average pooling run as named externs, max pooling is a gather
spec(
    "convolution_backward",
    lambda g, x, w: aten.convolution_backward(
        g, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]
    ),
    lambda dt: [(make((2, 4, 7, 9), dt), make((2, 3, 7, 9), dt), make((4, 3, 3, 3), dt))],
    (aten.convolution_backward.default,),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=("aten.convolution_backward",),
)
spec(
    "max_pool2d_backward",
    lambda g, x: tuple(
        aten.max_pool2d_with_indices_backward(
            g, x, k, s, p, [1, 1], ceil, aten.max_pool2d_with_indices(x, k, s, p, [1, 1], ceil)[1]
        )
        for k, s, p, ceil in (([3, 3], [2, 2], [1, 1], False), ([2, 2], [2, 2], [0, 0], True))
    ),
    lambda dt: [(make((2, 3, 5, 6), dt), make((2, 3, 9, 11), dt))],
    (aten.max_pool2d_with_indices_backward.default,),
    decompose=False,
    options={"max_pool_backward": "generated"},  # the CPU's default is ATen's kernel
)
spec(
    "avg_pool2d_backward",
    lambda g, x: aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], False, True, None),
    lambda dt: [(make((2, 3, 5, 6), dt), make((2, 3, 9, 11), dt))],
    (aten.avg_pool2d_backward.default,),
    dtypes=(F32,),
    decompose=False,
    extern=("aten.avg_pool2d_backward",),
)
spec(
    "sdpa_backward",
    lambda g, q, k, v: aten._scaled_dot_product_flash_attention_for_cpu_backward(
        g, q, k, v, *aten._scaled_dot_product_flash_attention_for_cpu(q, k, v), 0.0, False
    ),
    lambda dt: [
        (
            make((2, 3, 7, 8), dt),
            make((2, 3, 7, 8), dt),
            make((2, 3, 7, 8), dt),
            make((2, 3, 7, 8), dt),
        )
    ],
    (aten._scaled_dot_product_flash_attention_for_cpu_backward.default,),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=(
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward",
    ),
)

# extern kernels, with pointwise epilogues
spec(
    "matmuls",
    lambda a, b, c, x, y: (
        torch.relu(a @ b + 1),
        torch.addmm(c, a, b) * 2,
        torch.bmm(x, y) - 1,
        torch.baddbmm(x[:, :, :3], x, y) + 0,
    ),
    lambda dt: [
        (
            make((7, 9), dt),
            make((9, 3), dt),
            make((3,), dt),
            make((2, 3, 3), dt),
            make((2, 3, 3), dt),
        )
    ],
    (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default),
    dtypes=(F32, BF16),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"),
)
spec(
    "addmm_activation",
    lambda c, a, b: (
        torch._addmm_activation(c, a, b) + 1,
        torch._addmm_activation(c, a, b, use_gelu=True) * 2,
    ),
    lambda dt: [(make((3,), dt), make((7, 9), dt), make((9, 3), dt))],
    (aten._addmm_activation.default,),
    dtypes=(F32, BF16),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    # what loop-ir's cublas_epilogues.py makes on CUDA; the GELU is the tanh form there and
    # the exact one on the CPU, each compared with eager's own call
    extern=("aten._addmm_activation",),
)
spec(
    "convolution",
    lambda x, w, b: (torch.relu(F.conv2d(x, w, b, padding=1)),),
    lambda dt: [(make((2, 3, 7, 9), dt), make((4, 3, 3, 3), dt), make((4,), dt))],
    (aten.convolution.default,),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    # on the CPU through oneDNN with the relu fused (loop-ir's mkldnn.py), elsewhere ATen's
    extern=("aten.convolution", "torchkiln.mkldnn_convolution"),
)
spec(
    "conv_direct",
    # loop-ir's generated convolution (lowering/convolution.py): a depthwise one with a channel
    # multiplier, stride and dilation; a grouped one (2 input channels a group), padded on one
    # axis only; their taps laid out by the torchkiln::conv_taps extern
    lambda x, w1, w2: (
        torch.relu(
            torch.ops.torchkiln.conv_direct(
                x, torch.ops.torchkiln.conv_taps(w1), [2, 1], [1, 2], [1, 2], 6
            )
        ),
        torch.ops.torchkiln.conv_direct(
            x, torch.ops.torchkiln.conv_taps(w2), [1, 1], [0, 1], [1, 1], 3
        )
        * 2,
    ),
    lambda dt: [(make((2, 6, 9, 11), dt), make((12, 1, 3, 3), dt), make((3, 2, 5, 3), dt))],
    (torch.ops.torchkiln.conv_direct.default,),
    dtypes=(F32, BF16),
    tol={F32: (1e-4, 1e-4)},
    decompose=False,
    extern=("torchkiln.conv_taps",),
)
spec(
    "sdpa",
    lambda q, k, v: (F.scaled_dot_product_attention(q, k, v) * 2,),
    lambda dt: [(make((2, 3, 7, 8), dt), make((2, 3, 7, 8), dt), make((2, 3, 7, 8), dt))],
    (AnyOf(_SDPA_KERNELS),),
    dtypes=(F32,),
    tol={F32: (1e-4, 1e-4)},
    extern=tuple(str(op).removesuffix(".default") for op in _SDPA_KERNELS),
)


# random ops: judged by their distribution
def _check_random(outs, inputs):
    (u, u2, n, n2, b, bp, d, mask, _), x = outs, inputs[0]
    for t in (u, u2):
        assert 0 <= float(t.min()) and float(t.max()) < 1
        assert (
            abs(float(t.float().mean()) - 0.5) < 0.03
            and abs(float(t.float().var()) - 1 / 12) < 0.01
        )
    for t in (n, n2):
        assert abs(float(t.float().mean())) < 0.06 and abs(float(t.float().var()) - 1) < 0.1
    assert not torch.equal(u, u2)  # two random ops in one graph draw different numbers
    assert abs(float(b.float().mean()) - 0.3) < 0.03 and abs(float(bp.float().mean()) - 0.7) < 0.03
    keep = mask.float().mean()
    assert abs(float(keep) - 0.8) < 0.03
    torch.testing.assert_close(
        d, torch.where(mask, x / 0.8, torch.zeros_like(x)), rtol=1e-2, atol=1e-2
    )


spec(
    "random",
    lambda x: (
        torch.rand(64, 64),
        torch.rand_like(x),
        torch.randn(64, 64),
        torch.randn_like(x),
        torch.bernoulli(torch.full_like(x, 0.3)),
        torch.bernoulli(x, 0.7),
        aten.native_dropout(x, 0.2, True),
        x * 1,
    ),
    lambda dt: [(make((64, 64), dt),)],
    (
        aten.rand.default,
        aten.rand_like.default,
        aten.randn.default,
        aten.randn_like.default,
        aten.bernoulli.default,
        aten.bernoulli.p,
        aten.native_dropout.default,
    ),
    dtypes=(F32, BF16),
    kind="distribution",
    check=_check_random,
    decompose=False,
)
