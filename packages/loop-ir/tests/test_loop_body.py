"""The recorded loop body (loop_body.py): one run of each buffer's closure, replayed exactly.

Replaying a recording under a handler must emit what running the closure there emits, op for
op, at the body's own indices and at a kernel's other indices; the reads and writes read off
the recording must be the ones a recording handler sees; and the compiled graphs built from it
must still match eager.
"""

from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F
import torchkiln_loop_ir as L
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing, index_symbol
from torchkiln_loop_ir.ir import ComputedBuffer
from torchkiln_loop_ir.loop_body import LoopBody, iteration_order, iteration_ranges
from torchkiln_loop_ir.ops import set_ops_handler
from torchkiln_loop_ir.printing import PrintingHandler


def _closure(buf: ComputedBuffer):
    """The store body at iteration indices, as the scheduler ran it before the recording."""
    perm, store = iteration_order(buf), buf.store_body()

    def full(sizes, vals):
        it = iter(vals)
        return [sympy.Integer(0) if s == 1 else next(it) for s in sizes]

    def run(xs, rs):
        if perm is not None:
            logical = [None] * len(xs)
            for k, d in enumerate(perm):
                logical[d] = xs[k]
            xs = logical
        reduces = buf.is_reduction and any(s != 1 for s in buf.reduction_ranges)
        store(
            full(buf.ranges, xs),
            full(buf.reduction_ranges, rs)
            if reduces
            else [sympy.Integer(0)] * len(buf.reduction_ranges),
        )

    return run


def _printed(fn, xs, rs) -> list[str]:
    handler = PrintingHandler()
    with set_ops_handler(handler):
        fn(list(xs), list(rs))
    return handler.lines


def _buffers(trace, fn, *inputs) -> list[ComputedBuffer]:
    graph = L.lower(trace(fn, *inputs), list(inputs))
    bufs = [n for n in graph.nodes if isinstance(n, ComputedBuffer)]
    assert bufs
    return bufs


def _other_indices(n: int, prefix: str, sizes) -> list[sympy.Expr]:
    """Indices a fused kernel might hand a node: each variable a flattened, re-split index."""
    k = [index_symbol(prefix, i) for i in range(n)]
    return (
        [
            ModularIndexing(3 * v + 1, 1, 1 << 20) if i % 2 else FloorDiv(v * 4, 2) + v
            for i, v in enumerate(k)
        ]
        if sizes
        else []
    )


CASES = {
    "pointwise chain": (
        lambda x, y: ((x * 2 + y).sigmoid() - x.exp(),),
        lambda: (torch.randn(4, 6), torch.randn(4, 6)),
    ),
    "broadcast and view": (
        lambda x, y: ((x.t() + y).reshape(3, 8) * 2,),
        lambda: (torch.randn(6, 4), torch.randn(1, 6)),
    ),
    "softmax and var (welford)": (
        lambda x: (x.softmax(-1), x.var(-1, keepdim=True)),
        lambda: (torch.randn(5, 33),),
    ),
    "padding (masked)": (lambda x: (F.pad(x, (1, 2, 0, 1)) + 1,), lambda: (torch.randn(3, 4),)),
    "gather (indirect)": (
        lambda w, i: (F.embedding(i, w) * 3,),
        lambda: (torch.randn(10, 4), torch.randint(0, 10, (2, 5))),
    ),
    "argmax and any": (lambda x: (x.argmax(1), (x > 1).any(0)), lambda: (torch.randn(4, 9),)),
    "channels-last": (
        lambda x: ((x * 2).relu(),),
        lambda: (torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),),
    ),
    "scatter_add": (
        lambda x, i, s: (x.scatter_add(0, i, s),),
        lambda: (torch.zeros(5, 3), torch.randint(0, 5, (4, 3)), torch.randn(4, 3)),
    ),
}


def test_replay_emits_what_the_closure_emits(trace):
    """At the body's own indices and at other indices, op for op (PrintingHandler's text)."""
    for name, (fn, make) in CASES.items():
        for buf in _buffers(trace, fn, *make()):
            body = buf.loop_body
            xr, rr = iteration_ranges(buf)
            assert len(body.xvars) == len(xr) and len(body.rvars) == len(rr), name
            own = (body.xvars, body.rvars)
            assert _printed(body, *own) == _printed(_closure(buf), *own), (name, buf.name)
            other = (_other_indices(len(xr), "x", xr), _other_indices(len(rr), "r", rr))
            assert _printed(body, *other) == _printed(_closure(buf), *other), (name, buf.name)


def test_reads_and_writes_come_off_the_recording(trace):
    x, y = torch.randn(4, 6), torch.randn(6)
    (buf,) = _buffers(trace, lambda x, y: ((x + y) * x,), x, y)
    body = buf.loop_body
    names = {b.name for b in L.lower(trace(lambda x, y: ((x + y) * x,), x, y), [x, y]).inputs}
    assert body.read_names == names and body.write_names == {buf.name}
    x0, x1 = body.xvars
    reads = {i for _, i in body.reads}
    assert reads == {6 * x0 + x1, x1}
    # at other indices: the recorded indices with the variables replaced, all at once
    reads_at, writes_at, _ = body.accesses([x1, x0], [])
    assert {i for _, i in reads_at} == {6 * x1 + x0, x0}
    assert writes_at == [(buf.name, 6 * x1 + x0)]
    assert body.num_loads == 3 and body.reduction_types == ()


def test_reduction_types_and_indirect_symbols():
    def fn(xs, rs):
        i = L.ops.indirect_indexing(L.ops.load("idx", xs[0]), 10)
        v = L.ops.load("w", 4 * i + rs[0])
        mean, m2, weight = L.ops.reduction(torch.float32, torch.float32, "welford_reduce", v)
        L.ops.store_reduction("out", xs[0], m2)

    body = LoopBody.record(fn, 1, 1)
    assert body.reduction_types == ("welford_reduce",)
    assert body.read_names == {"idx", "w"} and body.write_names == {"out"}
    ind = index_symbol("tmp_ind", 0)
    assert ("w", 4 * ind + index_symbol("r", 0)) in body.reads
    assert body.exprs == (10,)
    # replayed, the handler's own indirect symbol replaces the recorded one
    lines = _printed(body, [index_symbol("x", 3)], [index_symbol("r", 1)])
    assert lines == _printed(fn, [index_symbol("x", 3)], [index_symbol("r", 1)])
    assert "4*i0 + r1" in lines[2]


def test_prints_readably(trace):
    bufs = _buffers(trace, lambda x: (F.pad(x, (1, 0)).sum(-1),), torch.randn(3, 4))
    text = "\n".join(str(b.loop_body) for b in bufs)
    assert text.startswith("LoopBody(x0, r0):\n    tmp0 = ops.index_expr(r0 - 1, torch.int64)")
    assert (
        "    with ops.masked(tmp5, other=0):\n        tmp6 = ops.load('x_1', r0 + 4*x0 - 1)" in text
    )
    assert "    tmp7 = masked_result(tmp6)" in text
    assert "ops.reduction(torch.float32, torch.float32, 'sum', tmp9)" in text
    assert text.endswith("    ops.store_reduction('buf0', x0, tmp10)")


def test_compiled_results_match_eager(check):
    """The schedule and kernels now come from recordings: every case still matches eager."""
    for fn, make in CASES.values():
        inputs = make()
        check(fn, *inputs, atol=1e-5, rtol=1e-5)
