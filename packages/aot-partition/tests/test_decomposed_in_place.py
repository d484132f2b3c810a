"""Decompositions that write in place leave no in-place op in the functional graph.

make_fx applies the decomposition table below functionalization, so the ops a decomposition
writes are not functionalized on the way: the core table's GRU and RNN cells (``add_``,
``mul_``, ``sigmoid_``, ``tanh_`` on their gates) reached the graph as they are, each an ATen
call loop-ir cannot fuse. ``trace_functional`` traces such a graph once more under
functionalization; an input's own mutation still comes back as an extra output.
"""

from __future__ import annotations

import torch
from torchkiln_aot_partition.trace import resolve_decompositions, trace_functional

aten = torch.ops.aten


def _in_place_ops(gm) -> list[str]:
    return [
        str(n.target)
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target._schema.is_mutable
    ]


def _gru(x, h, w_ih, w_hh, b_ih, b_hh):
    out, hy = torch._VF.gru(x, h, (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, False, False, False)
    return out, hy


def test_a_gru_under_no_grad_is_functional_and_matches_eager():
    args = [
        torch.randn(5, 2, 8),
        torch.randn(1, 2, 16),
        torch.randn(48, 8),
        torch.randn(48, 16),
        torch.randn(48),
        torch.randn(48),
    ]
    with torch.no_grad():
        fg = trace_functional(_gru, args, resolve_decompositions(None))
        assert _in_place_ops(fg.gm) == []
        got = fg.gm(*args)
        want = _gru(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def _scale_in_place(x, y):
    t = y * 2
    t.sigmoid_()  # an intermediate's in-place op: functionalized in the first trace already
    x.add_(t)  # an input's: the new value becomes an extra output
    return t + 1


def test_an_input_mutation_still_comes_back_as_an_output():
    decomps = {aten.sigmoid.default: lambda a: torch.ones_like(a).div_(a.neg().exp_().add_(1))}
    x, y = torch.randn(4), torch.randn(4)
    fg = trace_functional(_scale_in_place, [x, y], decomps)
    assert _in_place_ops(fg.gm) == []
    assert fg.mutated_inputs == (0,)
    x_ref = x.clone()
    want = _scale_in_place(x_ref, y)
    out, new_x = fg.gm(x, y)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(new_x, x_ref)
