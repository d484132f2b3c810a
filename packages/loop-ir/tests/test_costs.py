"""loop-ir's ``costs.py``: each kernel's floor of bytes and each extern matmul's or convolution's
FLOPs, checked against the sizes worked out by hand (and the kernels' results against eager)."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as loop_ir
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_loop_ir.costs import kernel_bytes, step_costs
from torchkiln_loop_ir.reference import ReferenceBackend


def _compile(fn, inputs):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    cg = loop_ir.compile_graph(gm, list(inputs), ReferenceBackend())
    for got, want in zip(cg(*inputs), fn(*inputs)):
        torch.testing.assert_close(got, want)
    return cg


def test_matmul_flops_and_a_reduction_kernels_bytes():
    m, k, n = 64, 128, 96

    def f(x, w, b):
        return (torch.nn.functional.gelu(x @ w + b).sum(-1),)

    cg = _compile(f, (torch.randn(m, k), torch.randn(k, n), torch.randn(n)))
    costs = step_costs(cg.scheduled)
    (mm,) = [c for c in costs if c["kind"] == "extern"]
    assert mm["name"].startswith("aten.mm") and mm["flops"] == 2 * m * k * n
    (kernel,) = [c for c in costs if c["kind"] == "kernel"]
    # the product read once (m x n), the bias once (n), the row sums written (m), float32
    assert kernel["bytes"] == 4 * (m * n + n + m)


def test_a_gather_counts_the_rows_it_reads_not_the_table():
    rows, width, vocab = 32, 64, 1000

    def f(idx, table):
        return (table[idx] * 2.0,)

    cg = _compile(f, (torch.randint(0, vocab, (rows,)), torch.randn(vocab, width)))
    (kernel,) = [c for c in step_costs(cg.scheduled) if c["kind"] == "kernel"]
    # the indices (int64), the rows gathered and the result: not the 1000-row table
    assert kernel["bytes"] == 8 * rows + 4 * rows * width + 4 * rows * width


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pointwise_bytes_follow_the_dtype_and_batched_matmuls_count(dtype):
    def f(a, b, c):
        return (torch.bmm(a, b) + c,)

    a, b = torch.randn(3, 8, 16, dtype=dtype), torch.randn(3, 16, 4, dtype=dtype)
    c = torch.randn(3, 8, 4, dtype=dtype)
    cg = _compile(f, (a, b, c))
    costs = step_costs(cg.scheduled)
    (bmm,) = [x for x in costs if x["kind"] == "extern"]
    assert bmm["flops"] == 2 * 3 * 8 * 16 * 4
    (kernel,) = [x for x in costs if x["kind"] == "kernel"]
    assert kernel["bytes"] == 3 * (3 * 8 * 4) * dtype.itemsize  # two reads, one write


def test_a_convolutions_flops():
    def f(x, w):
        return (torch.nn.functional.conv2d(x, w, padding=1, groups=2),)

    x, w = torch.randn(2, 8, 10, 10), torch.randn(6, 4, 3, 3)
    cg = _compile(f, (x, w))
    flops = [c["flops"] for c in step_costs(cg.scheduled) if c["kind"] == "extern"]
    # 2 x outputs (2 x 6 x 10 x 10) x taps a output (4 input channels of its group x 3 x 3)
    assert flops == [2 * (2 * 6 * 10 * 10) * (4 * 3 * 3)]


def test_a_padded_output_matmul_counts_its_unpadded_columns():
    # pad_mm's extern (a vocabulary head written into a wider output): a [M, K] @ [K, N]
    import sympy
    from torchkiln_loop_ir import pad_mm  # noqa: F401  (defines torchkiln::mm_padded_n)
    from torchkiln_loop_ir.backend import BufferRef, BufferSpec, ExternCall
    from torchkiln_loop_ir.costs import extern_flops

    def spec(name, *size):
        stride = [sympy.Integer(1)]
        for s in reversed(size[1:]):
            stride.insert(0, stride[0] * s)
        return BufferSpec(name, torch.bfloat16, torch.device("cpu"), size, tuple(stride))

    m, k, n = 64, 96, 50257
    buffers = {b.name: b for b in (spec("a", m, k), spec("b", k, n), spec("out", m, n + 7))}
    call = ExternCall(
        torch.ops.torchkiln.mm_padded_n.default,
        (None, BufferRef("a"), BufferRef("b"), n + 7),
        {},
        ("out",),
    )
    assert extern_flops(call, buffers) == 2 * m * k * n


def test_symbolic_sizes_give_no_figure():
    def f(x):
        return (x.sin() + 1,)

    x = torch.randn(5, 7)
    gm = make_fx(f, tracing_mode="symbolic", decomposition_table=loop_ir.decompositions())(x)
    cg = loop_ir.compile_graph(gm, [x], ReferenceBackend())
    torch.testing.assert_close(cg(x)[0], f(x)[0])
    specs = [s for s in cg.scheduled.steps if hasattr(s, "xranges")]
    assert specs and all(kernel_bytes(s) is None for s in specs)
