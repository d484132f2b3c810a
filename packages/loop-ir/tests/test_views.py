"""View lowerings: no copies for views of buffers, reindexing for views of computed values."""

from __future__ import annotations

import torch


def test_permute_transpose_expand(check):
    x = torch.randn(3, 5, 7)
    y = torch.randn(5, 1)
    check(lambda x, y: (x.permute(2, 0, 1) * 2, x.transpose(0, 2).contiguous(), y.expand(3, 5, 7) + x,
                        (x + 1).permute(1, 2, 0) * 3), x, y)


def test_view_reshape(check):
    x = torch.randn(6, 10)
    check(lambda x: (x.view(3, 20) + 1, (x * 2).reshape(60), x.t().reshape(5, 12) - 1,
                     (x.sin().t()).reshape(-1)), x)


def test_slice_select_squeeze(check):
    x = torch.randn(7, 9, 1)
    check(lambda x: (x[1:5, ::2] * 2, x[:, 3] + 1, x.squeeze(-1)[2:] - 1, x.unsqueeze(0) * 3,
                     (x + 1)[-3:, 1:8:3]), x)


def test_cat_split_unbind(check):
    a, b = torch.randn(3, 4), torch.randn(3, 5)
    check(lambda a, b: (torch.cat([a, b], 1) * 2, torch.cat([a.sin(), a], 0), *torch.split(b, 2, 1),
                        *torch.unbind(a, 0)), a, b)


def test_clone_and_as_strided(check):
    x = torch.randn(4, 6)
    check(lambda x: (x.clone(), torch.as_strided(x, (3, 3), (6, 2), 1) * 1), x)


def test_view_outputs_are_views_not_copies(compile_fn):
    x = torch.randn(4, 6)
    cg = compile_fn(lambda x: ((x * 2).t(), x.t()), x)
    got = cg(x)
    torch.testing.assert_close(got[0], (x * 2).t())
    assert got[1].data_ptr() == x.data_ptr() and got[1].stride() == (1, 6)
    assert cg.num_kernels == 1
