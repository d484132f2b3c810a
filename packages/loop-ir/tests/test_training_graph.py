"""A backward graph (embedding -> layer norm -> relu -> linear -> cross entropy, gradients)."""

from __future__ import annotations

import torch


def test_gradient_graph_matches_eager(check):
    emb, ln, lin = torch.nn.Embedding(20, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 20)
    modules = {"e": emb, "l": ln, "o": lin}
    names = [(m, k) for m, mod in modules.items() for k, _ in mod.named_parameters()]

    def loss(ps, idx, tgt):
        call = torch.func.functional_call
        e = call(emb, {"weight": ps[("e", "weight")]}, (idx,))
        h = call(ln, {"weight": ps[("l", "weight")], "bias": ps[("l", "bias")]}, (e,)).relu()
        out = call(lin, {"weight": ps[("o", "weight")], "bias": ps[("o", "bias")]}, (h,))
        return torch.nn.functional.cross_entropy(out.view(-1, 20), tgt.view(-1))

    def grads(*args):
        g = torch.func.grad(loss)(dict(zip(names, args[:-2])), args[-2], args[-1])
        return tuple(g[n] for n in names)

    params = [dict(modules[m].named_parameters())[k].detach() for m, k in names]
    idx, tgt = torch.randint(0, 20, (3, 5)), torch.randint(0, 20, (3, 5))
    cg = check(grads, *params, idx, tgt, atol=1e-4, rtol=1e-4)
    assert "aten.mm" in cg.extern_calls
    assert (
        cg.fallbacks == []
    )  # scatter (nll_loss backward) and index_put (embedding backward) lowered
