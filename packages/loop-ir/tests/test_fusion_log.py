"""The scheduler's decision log (``ScheduledGraph.fusion_log``): every fusion taken, every pair
refused with ``can_fuse``'s reason, and a stop line when ``max_fusions`` runs out; the accepted
records are exactly the fusions made (``Scheduler.log``), and the compiled graph still matches
eager with and without fuel."""

import torch
import torchkiln_loop_ir as L


def f(x):
    s = x.softmax(-1)
    # a transposed read of the softmax in the same kernel, and reductions of different shapes
    return s.sum(0) + x.mean(), x[::2].sum(), s.t().contiguous() * 2.0


def test_the_log_holds_accepted_and_rejected_fusions_with_reasons(check):
    x = torch.randn(8, 8)
    cg = check(f, x, atol=1e-5, rtol=1e-5)
    records = cg.scheduled.fusion_log
    accepted = [r for r in records if r.accepted]
    rejected = [r for r in records if not r.accepted]
    assert accepted and rejected
    assert all(r.reason for r in rejected), rejected
    assert any("different (x, r) sizes" in r.reason for r in rejected)
    # the text: one line per decision, each rejection carrying its reason
    lines = cg.fusion_text().splitlines()
    assert len(lines) == len(records)
    assert all(line.startswith("fused ") for line, r in zip(lines, records) if r.accepted)
    assert all(line.endswith(r.reason) for line, r in zip(lines, records) if not r.accepted)
    # the fused groups are the kernels: every accepted pair shares a kernel
    kernel_names = [
        {n.buffer for stage in spec.stages for n in stage.nodes} for spec in cg.kernel_specs
    ]
    for r in accepted:
        names = set(r.first.split("+")) | set(r.second.split("+"))
        assert any(names <= k for k in kernel_names), (names, kernel_names)


def test_running_out_of_fuel_is_recorded(check):
    x = torch.randn(8, 8)
    cg = check(f, x, atol=1e-5, rtol=1e-5, options=L.LoopIROptions(max_fusions=1))
    records = cg.scheduled.fusion_log
    assert sum(r.accepted for r in records) == 1
    assert str(records[-1]).startswith("stopped: max_fusions=1 spent, ")
    none = check(f, x, atol=1e-5, rtol=1e-5, options=L.LoopIROptions(max_fusions=0))
    assert not any(r.accepted for r in none.scheduled.fusion_log)
