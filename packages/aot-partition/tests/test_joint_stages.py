"""The joint trace's second stage (functionalization) is skipped only when it has nothing to do.

``joint_graph`` traces forward + autograd.grad (stage 1), then replays that graph under
functionalization (stage 2). When stage 1 holds no mutating op, no op the table decomposes and
no batch norm, the replay is op for op the same graph: it is skipped (half of the joint trace's
time on a full-size transformer). These tests pin that the skipped path gives the graph the
replay gives, and that graphs with mutations still take the replay.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _aot_test_modules import LinearBatchNorm
from torchkiln_aot_partition import aot_compile, joint_graph, lift_parameters
from torchkiln_aot_partition import joint as joint_module
from torchkiln_aot_partition.trace import (
    already_functional,
    resolve_decompositions,
    trace_functional,
)


class Block(torch.nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.dropout = dropout

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)))
        h = F.dropout(h, self.dropout, training=self.dropout > 0)
        return x + self.fc2(h).softmax(-1), h.sum()


def _shape(gm):
    """The graph's ops and how they connect, without node names."""
    index = {}
    out = []
    for node in gm.graph.nodes:
        index[node] = len(index)
        args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: ("node", index[n]))
        out.append(
            (
                node.op,
                str(node.target) if node.op != "placeholder" else "",
                str(args) if node.op != "placeholder" else "",
            )
        )
    return out


def _joint_both_ways(monkeypatch, module, x):
    """(graph with the replay forced, graph as joint_graph makes it, whether it skipped)."""
    lifted = lift_parameters(capture_module(module))
    primals = list(lifted.params) + [x]
    decomps = resolve_decompositions(None)
    replays = []
    real = joint_module.trace_functional

    def counting(*args, **kwargs):
        replays.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(joint_module, "trace_functional", counting)
    made = joint_graph(lifted.gm, primals, decomps)
    skipped = not replays
    monkeypatch.setattr(joint_module, "already_functional", lambda gm, d: False)
    forced = joint_graph(lifted.gm, primals, decomps)
    return forced, made, skipped


def capture_module(module):
    class Inline(torch.fx.Tracer):
        proxy_buffer_attributes = True

        def is_leaf_module(self, m, qualname):
            return False

    return torch.fx.GraphModule(module, Inline().trace(module))


def test_a_mutation_free_joint_skips_the_replay_and_equals_it(monkeypatch):
    x = torch.randn(4, 8, requires_grad=True)
    forced, made, skipped = _joint_both_ways(monkeypatch, Block(), x)
    assert skipped
    assert _shape(made.gm) == _shape(forced.gm)
    assert (
        made.num_primals,
        made.num_user_outputs,
        made.mutated_inputs,
        made.diff_outputs,
        made.grad_inputs,
    ) == (
        forced.num_primals,
        forced.num_user_outputs,
        forced.mutated_inputs,
        forced.diff_outputs,
        forced.grad_inputs,
    )


def test_dropout_and_batch_norm_joints_take_the_replay(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    _, made, skipped = _joint_both_ways(monkeypatch, Block(dropout=0.5), x)
    assert not skipped  # bernoulli_ / div_ in the stage-1 graph
    assert not any(
        n.target._schema.is_mutable
        for n in made.gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    )
    _, made, skipped = _joint_both_ways(
        monkeypatch, LinearBatchNorm(), torch.randn(8, 4, requires_grad=True)
    )
    assert not skipped
    assert made.mutated_inputs  # the running statistics are still written back


def test_already_functional_reads_schemas_and_the_table():
    def inplace(x):
        y = x * 2
        y.add_(1)
        return (y,)

    def pure(x):
        return (torch.ops.aten.mul.Tensor(x, 2),)

    table = resolve_decompositions(None)
    x = torch.randn(3)
    from torch.fx.experimental.proxy_tensor import make_fx

    assert not already_functional(make_fx(inplace)(x), table)
    assert already_functional(make_fx(pure)(x), table)
    assert not already_functional(make_fx(pure)(x), {torch.ops.aten.mul.Tensor: lambda a, b: a})
    # the replay of a functional graph is indeed the same ops
    replayed = trace_functional(make_fx(pure)(x), [x], table)
    assert [str(n.target) for n in replayed.gm.graph.nodes if n.op == "call_function"] == [
        "aten.mul.Tensor"
    ]


def test_gradients_of_the_skipped_path_match_eager(compiler, capture):
    mod = Block()
    ref = Block()
    ref.load_state_dict(mod.state_dict())
    x1 = torch.randn(4, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    compiled = aot_compile(capture(mod), [x1], fw_compiler=compiler)
    out, total = compiled(x1)
    want, want_total = ref(x2)
    torch.testing.assert_close(out, want)
    g = torch.randn_like(want)
    (out * g).sum().add(total).backward()
    (want * g).sum().add(want_total).backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    for p, q in zip(mod.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


class Views(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x, y):
        t = self.lin(x) * 2
        return x[1:], y.t(), t, t[:, 2:], y


def test_the_joint_fake_run_finds_the_aliases_a_run_of_their_own_finds(compiler, capture):
    # training reads the output aliases off the joint trace's fake run (no extra run of the graph)
    from torchkiln_aot_partition.mutation import find_output_aliases, output_aliases

    mod = Views()
    x, y = torch.randn(4, 6, requires_grad=True), torch.randn(3, 5)
    lifted = lift_parameters(capture(mod))
    primals = list(lifted.params) + [x, y]
    made = joint_graph(lifted.gm, primals, resolve_decompositions(None))
    own = find_output_aliases(lifted.gm, primals)
    assert made.fake_run is not None
    assert output_aliases(*made.fake_run) == own
    assert {a.output for a in own} == {0, 1, 3, 4}  # x[1:], y.t(), t[:, 2:] of t, y itself
    compiled = aot_compile(capture(mod), [x, y], fw_compiler=compiler)
    x1, y1 = torch.randn(4, 6, requires_grad=True), torch.randn(3, 5)
    got, want = compiled(x1, y1), mod(x1, y1)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert got[4] is y1 and got[1]._base is y1 and got[0]._base is x1
    y1.add_(1)  # a write to the input shows through its aliases, as in eager
    torch.testing.assert_close(got[1], y1.t())
    got[2].sum().backward()
    assert x1.grad is not None
