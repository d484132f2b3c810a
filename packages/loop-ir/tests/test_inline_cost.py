"""The realize policy's byte rule (inline_cost.py): a value read by several consumers is inlined
when recomputing it moves no more bytes than storing it, and is realized otherwise."""

from __future__ import annotations

import math

import torch
import torchkiln_loop_ir as L
from torchkiln_loop_ir.inline_cost import (
    MAX_RECOMPUTE_OPS,
    MAX_RECOMPUTE_OPS_CPU,
    max_recompute_ops,
)
from torchkiln_loop_ir.ir import ComputedBuffer


def _bn_relu_backward(conv, grad, mean, rstd, w, b):
    """Batch-norm backward through a ReLU, as autocast's backward graph computes it: the
    ReLU mask recomputed from the bfloat16 conv output, the masked gradient in float32, read by
    both per-channel sums and by the input gradient."""
    shape = (1, -1, 1, 1)
    xhat = (conv.float() - mean.reshape(shape)) * rstd.reshape(shape)
    out = (xhat * w.reshape(shape) + b.reshape(shape)).to(torch.bfloat16).relu()
    g = torch.where(out <= 0, torch.zeros((), dtype=grad.dtype), grad).float()
    n = conv.numel() // conv.shape[1]
    s1 = g.sum((0, 2, 3))
    s2 = (g * (conv.float() - mean.reshape(shape))).sum((0, 2, 3))
    dx = (g - xhat * (s2 / n * rstd).reshape(shape) - (s1 / n).reshape(shape)) * (rstd * w).reshape(
        shape
    )
    return dx.to(torch.bfloat16), s1, s2


def _inputs(n=3, c=5, h=6, w=7):
    conv = torch.randn(n, c, h, w).to(torch.bfloat16)
    grad = torch.randn(n, c, h, w).to(torch.bfloat16)
    mean = torch.randn(c) * 0.1
    rstd = torch.rand(c) + 0.5
    return conv, grad, mean, rstd, torch.randn(c), torch.randn(c)


#: the GPU's limit on a recomputed value's ops: the masked gradient's case is a GPU's (19 ops an
#: element, over the CPU's limit), and this machine has no GPU
GPU_POLICY = L.LoopIROptions(recompute_max_ops=MAX_RECOMPUTE_OPS)


def _realized_for_reuse(cg) -> list[ComputedBuffer]:
    return [
        b
        for b in cg.graph_ir.nodes
        if isinstance(b, ComputedBuffer) and b.reason.startswith("reused by")
    ]


def test_masked_gradient_is_recomputed_not_stored(check):
    torch.manual_seed(0)
    args = _inputs()
    cg = check(_bn_relu_backward, *args, atol=1e-2, rtol=1e-2, options=GPU_POLICY)
    # the float32 masked gradient (4 bytes) from two bfloat16 reads (4 bytes): inlined into its
    # three consumers, so no kernel writes a full-size intermediate for another to read back
    assert _realized_for_reuse(cg) == []
    inputs = {n.name for n in cg.graph_ir.inputs}
    for spec in cg.kernel_specs:
        assert set(spec.inputs) <= inputs, spec.inputs
    # the two per-channel sums in one pass, then the input gradient (one kernel when the
    # backend keeps the rows in one program)
    assert cg.num_kernels <= 2


def test_long_rows_channels_last_match_eager(check):
    torch.manual_seed(1)
    conv, grad, *rest = _inputs(4, 3, 32, 40)
    conv = conv.contiguous(memory_format=torch.channels_last)
    cg = check(_bn_relu_backward, conv, grad, *rest, atol=1e-2, rtol=1e-2, options=GPU_POLICY)
    assert _realized_for_reuse(cg) == []


def test_value_narrower_than_its_inputs_is_still_stored(check):
    torch.manual_seed(2)
    a, b = torch.randn(64, 33), torch.randn(64, 33)

    def fn(a, b):
        # bfloat16 (2 bytes) from two float32 reads (8 bytes), used twice: storing it is cheaper
        v = (a * b + a).exp().to(torch.bfloat16)
        return v.float().sum(1), (v * 3).float()

    cg = check(fn, a, b, atol=1e-2, rtol=1e-2)
    assert len(_realized_for_reuse(cg)) == 1


def _bucket(rel, buckets=32, max_distance=128):
    """A relative position's bucket (T5's scheme): exact below a quarter of the buckets, then
    logarithmic up to ``max_distance``, one half of the buckets per sign."""
    half = buckets // 2
    exact = half // 2
    n = rel.abs()
    log = (n.float() / exact).log() / math.log(max_distance / exact) * (half - exact)
    far = torch.minimum(exact + log.to(torch.long), torch.full_like(n, half - 1))
    return (rel > 0).to(torch.long) * half + torch.where(n < exact, n, far)


def _position_bias_softmaxes(heads, length):
    """T5's relative-position bias: a gather from a 32 x heads table by a bucket of ``j - i``,
    plus the padding mask, added to every layer's scores before its softmax."""

    def fn(table, mask, *scores):
        pos = torch.arange(length)
        bias = table[_bucket(pos[None, :] - pos[:, None])].permute(2, 0, 1).unsqueeze(0) + mask
        return [(s + bias).softmax(-1) for s in scores]

    return fn


def _position_bias_inputs(heads, length, layers, batch=2):
    scores = [torch.randn(batch, heads, length, length) for _ in range(layers)]
    mask = torch.zeros(batch, 1, 1, length)
    mask[-1, ..., -5:] = torch.finfo(torch.float32).min
    return torch.randn(32, heads), mask, *scores


def _reasons(cg) -> set[str]:
    return {b.reason for b in cg.graph_ir.nodes if isinstance(b, ComputedBuffer)}


def test_position_bias_is_recomputed_in_each_softmax_on_a_gpu(check):
    """The bias's body rebuilds ``j - i`` several times and reads nothing full-size, so on a GPU
    each softmax computes it where it needs it; realized (H200, float32, batch 16), the bias
    was 201 MB written once and read back by each of the 12 layers, with heads the innermost
    dim, so each softmax read it 48 bytes apart (306 us a layer, torch.compile 190). The GPU's
    limit on a recomputed value's ops (32) is asked for by option: this machine has no GPU."""
    torch.manual_seed(3)
    heads, length, layers = 4, 48, 6
    cg = check(
        _position_bias_softmaxes(heads, length),
        *_position_bias_inputs(heads, length, layers),
        options=GPU_POLICY,
    )
    # only the softmax statistics and the outputs are stored: no buffer holds the bias
    assert _reasons(cg) <= {"reduction", "graph output"}, _reasons(cg)


def test_position_bias_is_stored_once_on_a_cpu(check):
    """On a CPU the bias's ops do not hide behind the softmax's loads: t5-base at batch 1 x 512
    recomputed it in each of its 12 softmaxes, in each of their passes, 110 ms a layer (session
    33). Stored once, each layer reads it back. Checked to fail with the GPU's limit."""
    torch.manual_seed(4)
    heads, length, layers = 4, 48, 6
    fn = _position_bias_softmaxes(heads, length)
    args = _position_bias_inputs(heads, length, layers, batch=1)
    cg = check(fn, *args)
    stored = [
        b
        for b in cg.graph_ir.nodes
        if isinstance(b, ComputedBuffer) and b.reason.startswith("reused by")
    ]
    # the bias (heads x length x length, the mask added) is one stored buffer, read by every layer
    assert any(tuple(b.get_size()) == (1, heads, length, length) for b in stored), _reasons(cg)
    assert max_recompute_ops(torch.device("cpu")) == MAX_RECOMPUTE_OPS_CPU < MAX_RECOMPUTE_OPS


def test_value_read_twice_in_one_expression_stays_inline_on_a_cpu(check):
    """A nearest upsample (20 ops an element of index arithmetic, over the CPU's limit) read
    twice by its hard-swish, ``x * relu6(x + 3) / 6``: both reads meet in the product, whose
    kernel computes the upsample once an element, so nothing is stored for it."""
    torch.manual_seed(5)

    def fn(y):
        return torch.nn.functional.hardswish(
            torch.nn.functional.interpolate(y, scale_factor=2.0, mode="nearest")
        )

    cg = check(fn, torch.randn(2, 3, 5, 7))
    assert _realized_for_reuse(cg) == []
    assert cg.num_kernels == 1
