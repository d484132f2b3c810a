"""The backward computes each recomputed forward value right before its first use (as the
autograd engine would), not all of them at its start: what it must hold in memory lives from
there on, not for the whole backward."""

from __future__ import annotations

import torch
from torchkiln_aot_partition import (
    check_functional,
    joint_graph,
    lift_parameters,
    min_cut_partition,
)
from torchkiln_aot_partition.trace import resolve_decompositions


def _three_layers(x, w1, w2, w3, c):
    h = x @ w1  # saved: sin's backward reads it
    g = torch.sin(h) * 2  # c's gradient reads g: recomputed from h, not saved
    # g * c is saved: w2's gradient (a matmul) reads it from memory, recomputed or not
    return (((g * c) @ w2) @ w3,)


def test_recomputed_values_come_right_before_their_first_use(capture):
    torch.manual_seed(0)
    args = [torch.randn(6, 8), torch.randn(8, 12), torch.randn(12, 10), torch.randn(10, 4)]
    args.append(torch.randn(12))
    args = [a.requires_grad_() for a in args]
    joint = joint_graph(
        lift_parameters(capture(_three_layers)).gm, args, resolve_decompositions(None)
    )
    fw, bw = min_cut_partition(
        joint.gm, num_fwd_outputs=joint.num_fwd_outputs, num_primals=joint.num_primals
    )
    check_functional(fw)
    check_functional(bw)
    nodes = [n for n in bw.graph.nodes if n.op == "call_function"]
    sins = [i for i, n in enumerate(nodes) if "sin" in str(n.target)]
    assert sins, "the partition should recompute the sin in the backward"
    mms = [i for i, n in enumerate(nodes) if "mm" in str(n.target)]
    # the sin is recomputed after the backward's first two matrix multiplies (w3's gradient and
    # the gradient of g @ w2), which do not need it; in joint-graph order it came first
    assert min(sins) > sorted(mms)[1]
    for i, n in enumerate(nodes):  # every node still follows its inputs
        assert all(nodes.index(a) < i for a in n.all_input_nodes if a in nodes)
    # and the partition still computes eager's gradients, on fresh inputs
    for _ in range(2):
        fresh = [torch.randn_like(a) for a in args]
        tangent = torch.randn(6, 4)
        outs = fw(*fresh)
        grads = bw(*outs[1:], tangent)
        ref = [a.clone().requires_grad_() for a in fresh]
        (want,) = _three_layers(*ref)
        torch.testing.assert_close(outs[0], want)
        for got, expected in zip(grads, torch.autograd.grad(want, ref, tangent)):
            torch.testing.assert_close(got, expected)
