"""Merging a kernel's adjacent dims that every access walks as one (``merge_dims.py``, on for
backends whose ``BackendCapabilities.merge_dims`` is set): which dims merge, which must not, and
the merged kernels' results against eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln_loop_ir as L

MERGING = L.ReferenceBackend(
    capabilities=L.BackendCapabilities(
        reduction_broadcast_reduction=True, max_reduction_stages=8, merge_dims=True
    )
)


def _ranges(cg):
    return [
        (tuple(int(s) for s in k.xranges), tuple(int(s) for s in k.rranges))
        for k in cg.kernel_specs
    ]


def test_a_pointwise_kernel_over_a_contiguous_tensor_is_one_dim(check):
    x, y = torch.randn(4, 8, 7, 7), torch.randn(4, 8, 7, 7)
    cg = check(lambda x, y: ((x * 2 + y).relu(),), x, y, backend=MERGING)
    assert _ranges(cg) == [((4 * 8 * 49,), ())]


def test_a_per_channel_operand_keeps_the_channel_dim_apart(check):
    """(x - mean[c]) * scale[c] over (n, c, h, w): n and c stay apart (c is read alone), h and
    w merge; without the capability the kernel keeps four dims."""
    x, m, s = torch.randn(3, 5, 6, 7), torch.randn(5), torch.rand(5)

    def fn(x, m, s):
        return (((x - m[:, None, None]) * s[:, None, None]).relu(),)

    assert _ranges(check(fn, x, m, s, backend=MERGING)) == [((3, 5, 42), ())]
    assert _ranges(check(fn, x, m, s)) == [((3, 5, 6, 7), ())]


def test_the_reduction_dims_of_a_batch_norm_merge_within_r(check):
    """The statistics over (n, h, w) of NCHW: r = (n, h*w) (n's stride is not h*w's run), the
    normalisation after it in the same kernel."""
    x, w, b = torch.randn(4, 6, 5, 5), torch.randn(6), torch.randn(6)

    def fn(x, w, b):
        return (F.batch_norm(x, None, None, w, b, training=True).relu(),)

    cg = check(fn, x, w, b, backend=MERGING, atol=1e-5, rtol=1e-4)
    assert any(rr == (4, 25) for _, rr in _ranges(cg))


def test_a_transposed_read_blocks_the_merge(check):
    """out = x + y.transpose(2, 3): y walks h with stride 1 and w with stride H, so h and w
    cannot be one dim (x alone would allow it)."""
    x, y = torch.randn(2, 3, 5, 7), torch.randn(2, 3, 7, 5)
    cg = check(lambda x, y: (x + y.transpose(2, 3),), x, y, backend=MERGING)
    ((xr, _),) = _ranges(cg)
    assert xr[-2:] == (5, 7) and len(xr) >= 2


def test_an_upsampled_read_blocks_the_merge_of_the_dims_it_divides(check):
    """Nearest upsampling reads x[h // 2, w // 2]: a floor division of h and of w."""
    x = torch.randn(2, 3, 4, 5)
    cg = check(
        lambda x: (F.interpolate(x, scale_factor=2.0, mode="nearest") * 3,), x, backend=MERGING
    )
    ((xr, _),) = _ranges(cg)
    assert xr[-2:] == (8, 10)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 1, 3, 1), (3, 4, 5, 6)])
def test_a_softmax_over_channels_last_rows_and_a_sum_over_trailing_dims(check, shape):
    x = torch.randn(*shape).to(memory_format=torch.channels_last)

    def fn(x):
        return torch.softmax(x, 1) * 2, x.sum((2, 3)), x.permute(0, 2, 3, 1).contiguous().sin()

    check(fn, x, backend=MERGING, atol=1e-5, rtol=1e-5)


def test_symbolic_sizes_merge_too(compile_fn):
    """A kernel of sizes (s0, s1, s2): its contiguous dims merge into one of s0*s1*s2 and the
    compiled graph is right at other sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, y):
        return ((x * y).exp(),)

    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    gm = make_fx(fn, decomposition_table=L.decompositions(), tracing_mode="symbolic")(x, y)
    cg = L.compile_graph(gm, [x, y], MERGING)
    (kernel,) = cg.kernel_specs
    assert len(kernel.xranges) == 1 and not kernel.rranges
    for shape in [(2, 3, 4), (5, 1, 7), (1, 9, 2)]:
        x, y = torch.randn(*shape), torch.randn(*shape)
        (got,) = cg(x, y)
        torch.testing.assert_close(got, (x * y).exp())
