"""Perf hints of a compiled graph: a producer/consumer pair that another node separates (a
matmul between a layer norm's output and the residual add reading it again) is counted in one
line that says no fusion can join it, naming nothing to do; the fusion log keeps each pair with
the group between."""

from __future__ import annotations

import torch
import torchkiln
from torchkiln_loop_ir.scheduler import CYCLE_REASON as CYCLE


def _f(x, w):
    h = torch.nn.functional.layer_norm(x, (64,)) + 1.0
    y = h @ w
    return (y + h).relu().sum(-1)


def test_pairs_separated_by_a_matmul_are_one_line_not_a_list(tmp_path):
    compiled = torchkiln.compile(_f, options={"strict": True, "debug_dir": str(tmp_path)})
    for _ in range(2):  # fresh inputs each call
        x, w = torch.randn(32, 64), torch.randn(64, 64)
        torch.testing.assert_close(compiled(x, w), _f(x, w))
    (graph,) = torchkiln.report(compiled).graphs
    apart = [h for h in graph.perf_hints if "no fusion can join them" in h]
    assert len(apart) == 1 and apart[0].startswith("forward: ")
    assert not any(CYCLE in h for h in graph.perf_hints)  # none listed one by one
    log = (tmp_path / "_f_0" / "fusion_forward.txt").read_text()
    # the log names what lies between: the matmul, an extern call
    assert f"{CYCLE} an extern call between them" in log


def test_a_refused_reduction_is_one_hint_whatever_its_consumers_grow_into():
    """The scheduler retries a refused reduction -> consumer pair as the consumer's group grows;
    the hints name each reduction once."""
    from types import SimpleNamespace

    from torchkiln.perf_hints import graph_hints

    def record(first, second, score=(3, 4096, -1), reason="scatter nodes are not fused"):
        return SimpleNamespace(
            first=first, second=second, accepted=False, score=score, reason=reason
        )

    log = [
        record("buf7", "buf2"),
        record("buf7", "buf2+buf3"),
        record("buf7", "buf1+buf2+buf3"),
        record("buf9", "buf4"),
    ]
    compiled = SimpleNamespace(fallbacks=(), scheduled=SimpleNamespace(fusion_log=log))
    hints = graph_hints("backward", compiled)
    assert [h.split(" (")[0] for h in hints] == [
        "backward: unfused reduction buf7 -> buf2",
        "backward: unfused reduction buf9 -> buf4",
    ]
