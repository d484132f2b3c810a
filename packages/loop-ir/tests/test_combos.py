"""Combo kernels (combos.py): which independent pointwise kernels are launched as one, and where
in the order of steps; the schedule only (the numbers: tests/test_combo_kernels_e2e.py runs them
through codegen-triton)."""

from __future__ import annotations

import pytest
import sympy
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_loop_ir.backend import (
    BackendCapabilities,
    BufferRef,
    BufferSpec,
    ExternCall,
    KernelNode,
    KernelSpec,
    KernelStage,
    View,
)
from torchkiln_loop_ir.combos import combine_kernels
from torchkiln_loop_ir.compile import schedule
from torchkiln_loop_ir.graph import lower
from torchkiln_loop_ir.ops import ops

COMBOS = BackendCapabilities(reduction_broadcast_reduction=True, combo_kernels=8)


def _buffer(name, n=16):
    return BufferSpec(name, torch.float32, torch.device("cpu"), (sympy.Integer(n),), (1,))


def _copy(name, src, dst, n=16, atomic=False):
    """A pointwise kernel ``dst[i] = src[i] + 1`` over ``n`` elements."""

    def body(xs, rs):
        v = ops.add(ops.load(src, xs[0]), ops.constant(1.0, torch.float32))
        ops.store(dst, xs[0], v, "atomic_add" if atomic else None)

    stage = KernelStage("loop", (KernelNode(dst, body),))
    buffers = {src: _buffer(src, n), dst: _buffer(dst, n)}
    return KernelSpec(name, (sympy.Integer(n),), (), (stage,), buffers, (src,), (dst,))


def _mm(a, b, out):
    return ExternCall(torch.ops.aten.mm.default, (BufferRef(a), BufferRef(b)), {}, (out,))


def _buffers(steps, **sizes):
    """The specs of the steps' outputs (16 elements, or ``sizes[name]``)."""
    return {s.outputs[0]: _buffer(s.outputs[0], sizes.get(s.outputs[0], 16)) for s in steps}


def _valid(steps, inputs):
    """Every name a step reads was written before it (or is a graph input)."""
    made = set(inputs)
    for step in steps:
        members = step.combo if isinstance(step, KernelSpec) and step.combo else (step,)
        for m in members:
            if isinstance(m, KernelSpec):
                assert set(m.inputs) <= made, (m.name, m.inputs)
        for m in members:
            made |= set(getattr(m, "outputs", ()))
            if isinstance(m, View):
                made.add(m.name)
    return True


def _names(steps):
    return [
        (s.name, [m.name for m in s.combo])
        if isinstance(s, KernelSpec) and s.combo
        else s.name
        if isinstance(s, KernelSpec)
        else s.outputs[0]
        for s in steps
    ]


def test_casts_run_before_the_first_product_that_reads_one():
    steps = [
        _copy("k0", "w0", "c0"),
        _mm("x", "c0", "y0"),
        _copy("k1", "w1", "c1"),
        _mm("y0", "c1", "y1"),
        _copy("k2", "w2", "c2"),
        _mm("y1", "c2", "y2"),
    ]
    out = combine_kernels(steps, _buffers(steps), 8)
    assert _names(out) == [("combo0", ["k0", "k1", "k2"]), "y0", "y1", "y2"]
    assert _valid(out, {"x", "w0", "w1", "w2"})


def test_what_a_kernel_reads_must_be_written_first():
    # k1 reads y0, the first product's result: it cannot move before it, and k0 cannot move
    # after that product (it reads k0's output): k0 and k1 have no slot in common; k2 may run
    # anywhere before the second product, so it joins k0, the window that closes first
    steps = [
        _copy("k0", "w0", "c0"),
        _mm("x", "c0", "y0"),
        _copy("k1", "y0", "c1"),
        _copy("k2", "w2", "c2"),
        _mm("c1", "c2", "y1"),
    ]
    out = combine_kernels(steps, _buffers(steps), 8)
    assert _names(out) == [("combo0", ["k0", "k2"]), "y0", "k1", "y1"]
    assert _valid(out, {"x", "w0", "w2"})


def test_a_member_never_reads_another_members_output():
    # k1 reads k0's output and k2 reads k1's: only k0 is a member candidate of the chain, with
    # k3; a kernel reading a candidate's output keeps its place
    steps = [
        _copy("k0", "a", "b"),
        _copy("k1", "b", "c"),
        _copy("k2", "c", "d"),
        _copy("k3", "e", "f"),
        _mm("d", "f", "y"),
    ]
    out = combine_kernels(steps, _buffers(steps), 8)
    assert _valid(out, {"a", "e"})
    for s in out:
        if isinstance(s, KernelSpec) and s.combo:
            names = {m.name for m in s.combo}
            assert not ({"k0", "k1"} <= names or {"k1", "k2"} <= names)


def test_limits_atomics_and_large_kernels():
    steps = [
        _copy("k0", "w0", "c0"),
        _copy("k1", "w1", "c1", atomic=True),  # a scatter-like store: never a member
        _copy("k2", "w2", "c2", n=1 << 23),  # too large: fills the GPU alone
        _copy("k3", "w3", "c3"),
        _copy("k4", "w4", "c4"),
    ]
    out = combine_kernels(steps, _buffers(steps, c2=1 << 23), 2)
    combos = [s for s in out if isinstance(s, KernelSpec) and s.combo]
    members = [m.name for c in combos for m in c.combo]
    assert "k1" not in members and "k2" not in members
    assert all(len(c.combo) <= 2 for c in combos) and len(combos) == 1
    assert len(out) == 4


def _autocast_like(ws, x):
    h = x
    for w in ws:
        h = torch.mm(h, w.to(torch.bfloat16))
    return h.float().sum(0)


@pytest.mark.parametrize("mode, formed", [("always", True), ("auto", False), ("never", False)])
def test_schedule_forms_combos_by_option(mode, formed):
    # weights of different sizes, above the scheduler's tiny kernels (which it fuses anyway)
    dims = [8, 16, 24, 32, 8]
    ws = [torch.randn(a, b) for a, b in zip(dims, dims[1:])]
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    gm = make_fx(_autocast_like, decomposition_table=L.decompositions())(ws, x)
    inputs = [*ws, x]
    opts = L.LoopIROptions(combo_kernels=mode)
    sched = schedule(lower(gm, inputs, opts, COMBOS), COMBOS, opts)
    combos = [s for s in sched.steps if isinstance(s, KernelSpec) and s.combo]
    assert bool(combos) == formed  # "auto" combines on CUDA devices only
    assert _valid(list(sched.steps), set(sched.inputs))
    if formed:
        assert [len(c.combo) for c in combos] == [4]  # the four casts, before the first mm
        assert sched.steps.index(combos[0]) < min(
            i for i, s in enumerate(sched.steps) if isinstance(s, ExternCall)
        )


def test_moved_kernels_keep_at_most_max_bytes_more_alive():
    # each cast writes 64 bytes; hoisting k1 above mm0 holds its output one step longer, k2
    # three steps: with 100 bytes allowed, k0 takes k1 only, and k2 takes k3
    steps = []
    for i in range(4):
        steps += [_copy(f"k{i}", f"w{i}", f"c{i}"), _mm("x", f"c{i}", f"y{i}")]
    buffers = {s.outputs[0]: _buffer(s.outputs[0]) for s in steps}
    tight = combine_kernels(steps, buffers, 8, max_bytes=100)
    assert _names(tight) == [
        ("combo0", ["k0", "k1"]),
        "y0",
        "y1",
        ("combo1", ["k2", "k3"]),
        "y2",
        "y3",
    ]
    loose = combine_kernels(steps, buffers, 8)
    assert _names(loose) == [("combo0", ["k0", "k1", "k2", "k3"]), "y0", "y1", "y2", "y3"]
    # outputs the graph returns (a training forward's saved casts) are alive to the end anyway:
    # hoisting them costs nothing
    kept = combine_kernels(steps, buffers, 8, max_bytes=100, alive={"c1", "c2", "c3"})
    assert _names(kept) == _names(loose)
