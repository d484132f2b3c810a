"""Capture meeting torch.distributed: objects that talk to other processes act on every call.

One process (world size 1, an in-memory store): what is checked here is what capture does with
DistributedDataParallel's call and with methods of torch.distributed objects; training across two
processes is checked in packages/torchkiln/tests/test_distributed.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torchkiln_dynamo_capture import capture

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="this torch build has no torch.distributed gloo backend",
)


def _recording():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def test_store_method_runs_every_call():
    """``store.add`` is a method of a C++ object of torch.distributed: run once at capture time and
    baked in as a constant, the second call would multiply by 1 again."""

    def f(x, store):
        return x * store.add("calls", 1)

    graphs, backend = _recording()
    compiled = capture(f, backend)
    mine, theirs = dist.HashStore(), dist.HashStore()
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, mine), f(x, theirs), rtol=0, atol=0)
    assert mine.add("calls", 0) == 3


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_call_runs_in_python_and_wrapped_forward_is_captured(world_of_one):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    mine = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    theirs.load_state_dict(mine.state_dict())
    graphs, backend = _recording()
    compiled, eager = capture(DDP(mine), backend), DDP(theirs)
    for _ in range(2):
        x = torch.randn(5, 6)
        got, want = compiled(x), eager(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        got.square().sum().backward()
        want.square().sum().backward()
    for p, q in zip(mine.parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)
    # the wrapped Sequential is one graph: DDP's forward ran in Python around it, not inlined
    assert len(graphs) == 1
    targets = {n.target for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert (
        any("tanh" in str(t) for t in targets) and sum("linear" in str(t) for t in targets) >= 1
    ), targets
    breaks = [str(b) for b in compiled._captured.ctx.breaks]
    assert any("DistributedDataParallel" in b for b in breaks), breaks
    # the original module is untouched after the call (its forward was swapped for the call only)
    assert "forward" not in mine.__dict__
