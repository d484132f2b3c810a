"""Longformer's sliding-window attention in a training step under automatic dynamic shapes: two
graphs of its that fell back to eager once capture broke the graph at each data-dependent
size (dynamo-capture 0.9.10), each now compiled, strict, with gradients equal to eager's.

- The chunked scores: an einsum of two overlapping ``as_strided`` windows (symbolic strides),
  padded by a row and viewed transposed. The pad's backward is a crop (``constant_pad_nd`` with
  a negative pad), whose ATen kernel asks a tensor of symbolic strides for its
  ``storage_offset()``: the joint trace failed. loop-ir's decompositions crop with ``narrow``.
- The diagonal scores: written into a buffer made before a break (an input the graph mutates),
  viewed as ``[2, num_heads, 16, 9]`` with ``num_heads`` a size argument once it changed. The
  backward of that view reads ``num_heads``, which no saved tensor gave: no finite cut.
  aot-partition saves such a size as it is."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln


def _chunk(h: torch.Tensor, w: int) -> torch.Tensor:
    """Longformer's ``_chunk``: overlapping windows of 2w rows, w apart."""
    size = (h.size(0), h.size(1) // w - 1, 2 * w, h.size(2))
    return h.as_strided(size, (h.stride(0), w * h.stride(1), h.stride(1), h.stride(2)))


def _chunked_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    s = torch.einsum("bcxd,bcyd->bcxy", (q, k))
    s = F.pad(s, (0, 0, 0, 1))
    return s.view(*s.size()[:-2], s.size(-1), s.size(-2))


@pytest.mark.usefixtures("private_cache_dir")
def test_chunked_scores_of_overlapping_windows_train_under_dynamic_shapes():
    compiled = torchkiln.compile(_chunked_scores, options={"strict": True})
    for heads, dim in ((8, 16), (6, 12), (5, 8)):  # the second call makes sizes symbolic
        xq = torch.randn(32, heads, dim, requires_grad=True)
        xk = torch.randn(32, heads, dim, requires_grad=True)
        weight = torch.randn(heads, 7, 8, 9)
        grads = []
        for fn in (compiled, _chunked_scores):
            q, k = _chunk(xq.transpose(0, 1), 4), _chunk(xk.transpose(0, 1), 4)
            out = fn(q, k)
            (out * weight).sum().backward()
            grads.append((out.detach(), xq.grad, xk.grad))
            xq.grad = xk.grad = None
        for ours, eager in zip(*grads):
            torch.testing.assert_close(ours, eager)
    report = torchkiln.report(compiled)
    assert not report.graph_breaks and not report.eager_fallbacks, report


def _diagonal_scores(num_heads: int, scores: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    buf[:, :-1, :, 4:] = scores[:, :, :4, :5]
    buf[:, -1, :, 4:] = scores[:, -1, 4:, :5]
    buf[:, 1:, :, :4] = scores[:, :, -5:-1, 5:]
    buf[:, 0, 1:4, 1:4] = scores[:, 0, :3, -3:]
    t = buf.view(2, num_heads, 16, 9).transpose(2, 1)
    mask = t.new_ones(4, 5).tril().flip(dims=[0])[None, :, None, :]
    a = t[:, :4, :, :5]
    t[:, :4, :, :5] = torch.full_like(a, -1e4).where(mask.expand(2, 4, a.size(2), 5).bool(), a)
    return t


@pytest.mark.usefixtures("private_cache_dir")
def test_a_size_argument_read_by_the_backward_of_a_written_buffer():
    compiled = torchkiln.compile(_diagonal_scores, options={"strict": True})
    for heads in (4, 3, 2):  # the second call makes num_heads a size symbol
        scores = torch.randn(2 * heads, 3, 8, 9, requires_grad=True)
        weight = torch.randn(2, 16, heads, 9)
        results = []
        for fn in (compiled, _diagonal_scores):
            out = fn(heads, scores, torch.zeros(2 * heads, 4, 4, 9))
            (out * weight).sum().backward()
            results.append((out.detach(), scores.grad))
            scores.grad = None
        for ours, eager in zip(*results):
            torch.testing.assert_close(ours, eager)
    report = torchkiln.report(compiled)
    assert not report.graph_breaks and not report.eager_fallbacks, report
