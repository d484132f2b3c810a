"""Steady-state per-call time, eager vs captured with a backend that just runs the graph: a 20-layer
MLP, and a tiny function ``(x * y + 1).relu().sum()`` on two 8-element tensors (where the per-call
overhead of guards + run function shows).

Run: python packages/dynamo-capture/benchmarks/capture_overhead.py
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torchkiln_dynamo_capture import capture


def make_mlp(layers: int = 20, width: int = 64) -> nn.Module:
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods)


def per_call_us(fn, x, iters: int) -> float:
    for _ in range(50):
        fn(x)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(x)
    return (time.perf_counter() - t0) / iters * 1e6


def main(iters: int = 2000, rounds: int = 5) -> None:
    torch.manual_seed(0)
    model = make_mlp().eval()
    captured = capture(model, lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(8, 64)
    with torch.no_grad():
        torch.testing.assert_close(captured(x), model(x))
        eager, cap = [], []
        for _ in range(rounds):  # interleaved, best of each
            eager.append(per_call_us(model, x, iters))
            cap.append(per_call_us(captured, x, iters))
    e, c = min(eager), min(cap)
    print(f"mlp  eager    {e:8.1f} us/call")
    print(f"mlp  captured {c:8.1f} us/call  ({(c / e - 1) * 100:+.1f}% vs eager)")

    def tiny(x, y):
        return (x * y + 1).relu().sum()

    a, b = torch.randn(8), torch.randn(8)
    tiny_c = capture(tiny, lambda gm, ex: gm.forward, fullgraph=True)
    torch.testing.assert_close(tiny_c(a, b), tiny(a, b))
    te, tc, tg = [], [], []
    check = tiny_c.entries[0].check
    for _ in range(rounds):
        te.append(per_call_us(lambda x: tiny(x, b), a, iters * 5))
        tc.append(per_call_us(lambda x: tiny_c(x, b), a, iters * 5))
        tg.append(per_call_us(lambda x: check(x, b), a, iters * 5))
    print(f"tiny eager    {min(te):8.2f} us/call")
    print(
        f"tiny captured {min(tc):8.2f} us/call  (overhead {min(tc) - min(te):+.2f} us; guard check {min(tg):.2f} us)"
    )


if __name__ == "__main__":
    main()
