"""recompute_policy.py: the cut saves what a backward matmul reads, and breaks residual chains
(a recompute reads at most two saved values its size), with eager's gradients."""

from __future__ import annotations

import torch
from torchkiln_aot_partition import joint_graph, lift_parameters, min_cut_partition
from torchkiln_aot_partition.trace import resolve_decompositions

LAYERS = 6
MAX_INPUTS = 2  # recompute_policy.MAX_RECOMPUTE_INPUTS, as documented


def _residual_stream(a, w1, s1, w2, s2, w3, s3, w4, s4, w5, s5, w6, s6):
    """Post-norm-like residual stream, as under autocast: each layer adds a bfloat16 matmul of
    the input ``a`` (whose weight gradient reads ``a``, not the stream) to the float32 stream
    and scales by a per-feature parameter, whose gradient reads the stream: the stream is needed
    in the backward, only through cheap ops, and the matmul outputs are half its size."""
    h = a.float()
    for w, s in ((w1, s1), (w2, s2), (w3, s3), (w4, s4), (w5, s5), (w6, s6)):
        h = (h + a @ w) * s
    return (h,)


def _partition(fn, args):
    joint = joint_graph(lift_parameters(fn).gm, args, resolve_decompositions(None))
    return min_cut_partition(
        joint.gm, num_fwd_outputs=joint.num_fwd_outputs, num_primals=joint.num_primals
    )


def _recompute_depth(bw) -> int:
    """The longest chain of forward ops the backward recomputes (nodes reading no tangent; the
    graph has one output, so one tangent: the last input)."""
    tangents = {[n for n in bw.graph.nodes if n.op == "placeholder"][-1]}
    tangent_fed: set = set()
    depth: dict = {}
    for n in bw.graph.nodes:
        if n.op != "call_function":
            continue
        if any(a in tangents or a in tangent_fed for a in n.all_input_nodes):
            tangent_fed.add(n)
            continue
        counted = 0 if n.target.is_view else 1
        depth[n] = counted + max((depth.get(a, 0) for a in n.all_input_nodes), default=0)
    return max(depth.values(), default=0)


def _check_gradients(fn, fw, bw, args, atol=1e-4, rtol=1e-4):
    for _ in range(2):  # fresh inputs
        fresh = [torch.randn_like(a) for a in args]
        outs = fw(*fresh)
        tangent = torch.randn_like(outs[0])
        grads = bw(*outs[1:], tangent)
        ref = [a.clone().requires_grad_() for a in fresh]
        (want,) = fn(*ref)
        torch.testing.assert_close(outs[0], want, atol=atol, rtol=rtol)
        for got, expected in zip(grads, torch.autograd.grad(want, ref, tangent)):
            torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)


def test_a_residual_stream_is_saved_every_few_layers(capture):
    torch.manual_seed(0)
    args = [torch.randn(8, 16, dtype=torch.bfloat16)]
    for _ in range(LAYERS):
        args += [torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16)]
    args = [a.requires_grad_() for a in args]
    fw, bw = _partition(capture(_residual_stream), args)
    # without the policy the cut saves the six matmul outputs and recomputes the stream from
    # the first layer (a chain of twelve ops); now each recompute reads one or two layers
    assert _recompute_depth(bw) <= 2 * MAX_INPUTS, bw.code
    saved = fw.meta["partition"].saved
    stream = [n for n in saved if n.startswith(("add", "mul"))]
    assert len(stream) >= LAYERS // (MAX_INPUTS + 1), saved
    _check_gradients(_residual_stream, fw, bw, args, atol=2e-2, rtol=2e-2)


def _cast_then_matmul(x, w1, w2):
    g = torch.sin(x @ w1) * 2  # the backward's matmul (w2's gradient) reads g
    return (g @ w2,)


def test_what_a_backward_matmul_reads_is_saved_not_recomputed(capture):
    torch.manual_seed(0)
    args = [torch.randn(6, 8), torch.randn(8, 12), torch.randn(12, 4)]
    args = [a.requires_grad_() for a in args]
    fw, bw = _partition(capture(_cast_then_matmul), args)
    recomputed = [n for n in bw.graph.nodes if n.op == "call_function" and "sin" in str(n.target)]
    assert not recomputed, bw.code  # the forward had g in memory for its own matmul
    _check_gradients(_cast_then_matmul, fw, bw, args)
