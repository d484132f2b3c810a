"""The scheduler: kernel counts of fused graphs, fuel, can_fuse reasons, capabilities."""

from __future__ import annotations

import torch
import torchkiln_loop_ir as L
from torchkiln_loop_ir.memory import eliminate_dead_code
from torchkiln_loop_ir.scheduler import Scheduler


def _layernorm_gelu_residual(x, r, w, b):
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    return (torch.nn.functional.gelu(y) + r,)


def test_pointwise_chain_ending_in_sum_is_one_kernel(check):
    x, y = torch.randn(7, 257), torch.randn(257)
    cg = check(lambda x, y: (((x * 2 + y).relu().sin()).sum(1),), x, y, atol=1e-4, rtol=1e-5)
    assert cg.num_kernels == 1


def test_layernorm_gelu_residual_is_one_kernel(check):
    x, r, w, b = torch.randn(7, 33), torch.randn(7, 33), torch.randn(33), torch.randn(33)
    cg = check(_layernorm_gelu_residual, x, r, w, b, atol=1e-5, rtol=1e-5)
    assert cg.num_kernels == 1
    (kernel,) = cg.kernel_specs
    # one Welford pass (mean and m2 share it), then one pass normalizing, gelu and the add
    assert kernel.rranges == (33,) and len(kernel.stages) == 2
    assert [n.is_reduction for n in kernel.stages[0].nodes] == [True, True]
    assert not any(n.is_reduction for n in kernel.stages[1].nodes)
    assert set(kernel.inputs) == {"x_1", "r_1", "w_1", "b_1"}


def test_without_reduction_broadcast_reduction_softmax_splits(check):
    caps = L.BackendCapabilities(reduction_broadcast_reduction=False)
    backend = L.ReferenceBackend(capabilities=caps)
    x, r = torch.randn(5, 17), torch.randn(5, 17)
    cg = check(
        lambda x, r: (torch.softmax(x, -1) + r,), x, r, backend=backend, atol=1e-5, rtol=1e-5
    )
    # max, then sum(exp(x - max)) reads the broadcast max, then the division: three kernels
    assert cg.num_kernels == 3
    for k in cg.kernel_specs:
        assert sum(1 for s in k.stages if s.kind == "loop") <= 1


def test_max_fusions_zero_gives_one_kernel_per_buffer(check):
    x, r, w, b = torch.randn(4, 9), torch.randn(4, 9), torch.randn(9), torch.randn(9)
    cg = check(
        _layernorm_gelu_residual,
        x,
        r,
        w,
        b,
        options=L.LoopIROptions(max_fusions=0),
        atol=1e-5,
        rtol=1e-5,
    )
    realized = [n for n in cg.graph_ir.nodes if hasattr(n, "data")]
    assert cg.num_kernels == len(realized) == 4
    one = check(
        _layernorm_gelu_residual,
        x,
        r,
        w,
        b,
        options=L.LoopIROptions(max_fusions=1),
        atol=1e-5,
        rtol=1e-5,
    )
    assert one.num_kernels == 3


def test_horizontal_fusion_of_siblings(check):
    x = torch.randn(6, 40)
    cg = check(lambda x: (x.sum(1), x.amax(1), (x * x).sum(1)), x, atol=1e-4, rtol=1e-5)
    assert cg.num_kernels == 1


def test_reductions_over_different_dims_are_not_fused_with_reason(trace):
    x = torch.randn(6, 40)
    gm = trace(lambda x: (x.sum(0), x.sum(1)), x)
    graph = L.lower(gm, [x])
    outputs = {o.name for o in graph.outputs}
    sched = Scheduler(
        eliminate_dead_code(graph.nodes, outputs), L.ReferenceBackend().capabilities, outputs
    )
    a, b = sched.groups
    decision = sched.can_fuse(a, b)
    assert not decision and "different" in decision.reason


def test_cycle_through_extern_is_refused(trace):
    x, m = torch.randn(4, 4), torch.randn(4, 4)
    # buf0 = x*2 -> mm(buf0, m) -> + buf0: fusing the two pointwise nodes would need the mm inside
    gm = trace(lambda x, m: ((((x * 2).sin() @ m) + (x * 2).sin()).cos(), (x * 2).sin() + 1), x, m)
    graph = L.lower(gm, [x, m])
    outputs = {o.name for o in graph.outputs}
    sched = Scheduler(
        eliminate_dead_code(graph.nodes, outputs), L.ReferenceBackend().capabilities, outputs
    )
    kernels = [g for g in sched.groups if not g.is_extern]
    first = kernels[0]
    after = [g for g in kernels if g is not first and any("buf" in n for n in g.read_names)]
    cyc = [
        g
        for g in after
        if sched.can_fuse(first, g).reason.startswith("fusing would create a cycle")
    ]
    assert cyc


def test_graph_ir_prints_buffers_layouts_and_ops(trace):
    x = torch.randn(3, 5)
    gm = trace(lambda x: ((x.exp() + 1).sum(1),), x)
    text = str(L.lower(gm, [x]))
    assert "ComputedBuffer FixedLayout(cpu, float32, size=[3], stride=[1])" in text
    assert (
        "ops.load('x_1', r0 + 5*x0)" in text
        and "ops.exp(" in text
        and "realized because: reduction" in text
    )


def test_reduction_over_leading_dim_fuses_with_its_pointwise_users(check):
    x = torch.randn(257, 3)
    cg = check(lambda x: (x.softmax(0), x.var(0)), x, atol=1e-5, rtol=1e-5)
    assert cg.num_kernels == 1


def test_channels_last_pointwise_iterates_in_memory_order(check):
    # a channels-last result is written with the channel innermost (unit stride), not the width
    x = torch.randn(2, 5, 6, 7).contiguous(memory_format=torch.channels_last)
    y = torch.randn(2, 5, 6, 7).contiguous(memory_format=torch.channels_last)
    cg = check(lambda x, y: ((x * 2 + y).relu(),), x, y)
    (kernel,) = cg.kernel_specs
    assert tuple(kernel.xranges) == (2, 6, 7, 5)
    out = cg(x, y)[0]
    assert out.is_contiguous(memory_format=torch.channels_last)
    # a contiguous consumer of a channels-last value still lines up with eager
    check(lambda x: ((x.relu() + 1).contiguous() * 3, x.relu() + 1), x)


def test_consumers_of_a_multi_output_kernel_fuse_as_siblings(check):
    """Two column sums of one input share a kernel (a multi-output kernel); the two row sums of
    their results read different buffers of it, over the same ranges: siblings, one kernel (a
    batch-norm backward's two per-channel sums, each finished from its split partials)."""
    x = torch.randn(48, 4096)

    def f(x):
        a, b = x.sum(0), (x * x).sum(0)
        return a.view(64, 64).sum(1), b.view(64, 64).amax(1)

    cg = check(f, x, atol=1e-3, rtol=1e-5)
    assert cg.num_kernels == 2


def test_tiny_independent_pointwise_kernels_fuse(check):
    """One-element updates that share no buffer (each batch norm's num_batches_tracked += 1) are
    one kernel; a tiny kernel of another size, and a large one, stay apart."""
    a, b, c = torch.tensor(3), torch.tensor(5), torch.tensor(7)
    v, big = torch.randn(5), torch.randn(4096)
    cg = check(lambda a, b, c, v, big: (a + 1, b + 1, c * 2, v * 3, big.sin()), a, b, c, v, big)
    assert cg.num_kernels == 3


def test_large_siblings_stay_apart(check):
    """Siblings that visit more than a million points each are not launch-bound: one kernel
    would gain nothing and run their work in fewer programs (BERT's backward fused six layers'
    weight-gradient sums into one slow kernel). The same graph as above, at a larger size."""
    x = torch.randn(2, 1 << 21)

    def f(x):
        a, b = x.sum(0), (x * x).sum(0)
        return a.view(2048, 1024).sum(1), b.view(2048, 1024).amax(1)

    cg = check(f, x, atol=1e-3, rtol=1e-4)
    assert cg.num_kernels == 3
    refusals = [str(d) for d in cg.scheduled.fusion_log if not d.accepted]
    assert any("share no buffer and are not launch-bound" in r for r in refusals)
