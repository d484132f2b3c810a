"""Mixed-order kernels (loop-ir's mixed_order.py): a layer norm backward's row sums (the input's
gradient) and its weight's and bias's column sums in one pass over the rows, each program
looping over a chunk of rows and storing one partial row per column sum. Under Triton's
interpreter, against eager and float64 on fresh random inputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend
from torchkiln_loop_ir.mixed_order import narrow_programs

loop_ir = pytest.importorskip("torchkiln_loop_ir")

DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.bfloat16, id="bf16")]


def _layer_norm_backward(width):
    def fn(g, x, mean, rstd, w):
        return torch.ops.aten.native_layer_norm_backward(
            g, x, [width], mean, rstd, w, w, [True, True, True]
        )

    return fn


def _rms_norm_backward(g, x, w):
    """What an RMSNorm's backward computes: the input's gradient from two row sums, the
    weight's from a column sum of ``g * x * rstd``."""
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    gw = g.float() * w.float()
    dx = rstd * (gw - x.float() * rstd.pow(2) * (gw * x.float()).mean(-1, keepdim=True))
    dw = (g.float() * x.float() * rstd).sum(0)
    return dx.to(x.dtype), dw.to(w.dtype)


def _compile(fn, inputs, **options):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    opts = loop_ir.LoopIROptions(**({"split_programs": 64} | options))
    return loop_ir.compile_graph(gm, list(inputs), TritonBackend(), opts)


def _check(cg, fn, inputs):
    """Each output no further from float64 than twice eager's own error plus one rounding of
    the output's dtype (sums added in another order may round a 16-bit output the other way:
    one bfloat16 step where eager's largest error was a quarter step)."""
    exact = fn(*(t.double() if t.is_floating_point() else t for t in inputs))
    for got, want, e in zip(cg(*inputs), fn(*inputs), exact, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        e = e.double()
        step = max(1e-5, torch.finfo(got.dtype).eps)
        ours, eagers = (got.double() - e).abs().max(), (want.double() - e).abs().max()
        assert ours <= 2 * eagers + step * (1 + e.abs().max()), (ours, eagers)


def _mixed(cg):
    return [(s, k) for s, k in zip(cg.kernel_specs, cg.kernels) if s.row_programs]


def _layer_norm_inputs(shape, dtype):
    width = shape[-1]
    x = (torch.randn(shape) * 2 + 1).to(dtype)
    g, w = torch.randn(shape).to(dtype), torch.randn(width).to(dtype)
    _, mean, rstd = torch.native_layer_norm(x, [width], w, w, 1e-5)
    return g, x, mean, rstd, w


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((512, 128), id="512x128"),
        pytest.param((384, 96), id="384x96"),
        pytest.param((4, 96, 200), id="4x96x200"),
        # one row an iteration: the row loop is pipelined (tl.range(num_stages=3))
        # (a column sum of 4096 outputs splits for a target of 256 programs, not 64)
        pytest.param((256, 4096), id="256x4096"),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_backward_is_one_pass(dtype, shape):
    inputs = _layer_norm_inputs(shape, dtype)
    fn = _layer_norm_backward(shape[-1])
    programs = 256 if shape[-1] == 4096 else 64
    cg = _compile(fn, inputs, split_programs=programs)
    mixed = _mixed(cg)
    assert len(mixed) == 1, cg.schedule_text()
    spec, kernel = mixed[0]
    rows = int(torch.tensor(shape[:-1]).prod())
    # narrow rows aim for up to four times the target programs (loop-ir's narrow_programs)
    assert rows % spec.row_programs == 0
    assert spec.row_programs <= narrow_programs(shape[-1], programs, 4)
    # the row sums, the input's gradient and both column partials in the one kernel
    across = [n for st in spec.stages for n in st.nodes if n.across_rows]
    assert len(across) == 2
    assert kernel.config.rows == rows // spec.row_programs
    assert "def tk_mix_" in kernel.source  # its kind in its name, as profilers show it
    assert "for xoffset in range(p0 * " in kernel.source or (
        kernel.config.xblock == 1 and "for xoffset in tl.range(p0 * " in kernel.source
    )
    # one pass over the rows: no other kernel reads g or x
    full = [n for n, b in spec.buffers.items() if tuple(b.size) == tuple(shape)]
    readers = [s.name for s in cg.kernel_specs if set(s.inputs) & set(full)]
    assert readers == [spec.name], cg.schedule_text()
    _check(cg, fn, inputs)


def _layer_norm_backward_and_bias_grad(width):
    """A layer norm backward and the column sums of its input's gradient: the bias gradient of
    the linear or convolution that made the layer norm's input (BERT's output dense,
    ConvNeXt's depthwise convolution)."""

    def fn(g, x, mean, rstd, w):
        dx, dw, db = _layer_norm_backward(width)(g, x, mean, rstd, w)
        return dx, dw, db, dx.sum(tuple(range(dx.dim() - 1)))

    return fn


@pytest.mark.parametrize(
    "shape", [pytest.param((512, 128), id="512x128"), pytest.param((4, 96, 200), id="4x96x200")]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_column_sums_of_the_input_gradient_share_the_row_kernel(dtype, shape):
    """The input gradient's column sums are taken from the values the row kernel computes
    (each as it is stored, in the output's dtype), not read again by a kernel of their own;
    with ``mixed_order_reductions="loaded"`` they keep that kernel."""
    inputs = _layer_norm_inputs(shape, dtype)
    fn = _layer_norm_backward_and_bias_grad(shape[-1])
    cg = _compile(fn, inputs)
    mixed = _mixed(cg)
    assert len(mixed) == 1, cg.schedule_text()
    spec, _ = mixed[0]
    across = [n for st in spec.stages for n in st.nodes if n.across_rows]
    assert len(across) == 3, cg.schedule_text()
    full = [n for n, b in spec.buffers.items() if tuple(b.size) == tuple(shape)]
    readers = [s.name for s in cg.kernel_specs if set(s.inputs) & set(full)]
    assert readers == [spec.name], cg.schedule_text()
    _check(cg, fn, inputs)

    loaded = _compile(fn, inputs, mixed_order_reductions="loaded")
    ((spec, _),) = _mixed(loaded)
    assert len([n for st in spec.stages for n in st.nodes if n.across_rows]) == 2
    assert len(loaded.kernel_specs) > len(cg.kernel_specs)
    _check(loaded, fn, inputs)


@pytest.mark.parametrize(("rows_option", "xblock"), [(0, 8), (1, 1)])
def test_narrow_rows_take_a_tile_of_rows_an_iteration(rows_option, xblock):
    """Rows of 96 values (ConvNeXt-tiny's first stage): eight an iteration by default (a tile
    of 1024 values, not pipelined), one when ``TritonOptions.mixed_rows`` asks for it; the
    same numbers either way."""
    from torchkiln_codegen_triton import TritonOptions

    inputs = _layer_norm_inputs((1024, 96), torch.bfloat16)
    fn = _layer_norm_backward_and_bias_grad(96)
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    backend = TritonBackend(options=TritonOptions(mixed_rows=rows_option))
    options = loop_ir.LoopIROptions(split_programs=64, mixed_order_narrow_programs=1)
    cg = loop_ir.compile_graph(gm, list(inputs), backend, options)
    ((_, kernel),) = _mixed(cg)
    assert kernel.config.xblock == xblock and kernel.config.rblock == 128
    assert ("tl.range(" in kernel.source) == (xblock == 1)  # one row: pipelined
    _check(cg, fn, inputs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_backward_is_one_pass(dtype):
    x, g, w = (torch.randn(256, 160) * 2).to(dtype), torch.randn(256, 160).to(dtype), None
    w = torch.randn(160).to(dtype)
    cg = _compile(_rms_norm_backward, (g, x, w))
    assert len(_mixed(cg)) == 1, cg.schedule_text()
    _check(cg, _rms_norm_backward, (g, x, w))


def test_rows_with_few_divisors_keep_two_kernels():
    """509 rows (a prime) divide into no useful number of programs: the column sums keep
    their own kernel, and the results are the same."""
    inputs = _layer_norm_inputs((509, 64), torch.float32)
    fn = _layer_norm_backward(64)
    cg = _compile(fn, inputs)
    assert not _mixed(cg)
    _check(cg, fn, inputs)


def test_option_off_keeps_two_kernels():
    inputs = _layer_norm_inputs((512, 128), torch.float32)
    fn = _layer_norm_backward(128)
    cg = _compile(fn, inputs, mixed_order_reductions=False)
    assert not _mixed(cg)
    _check(cg, fn, inputs)


def test_rows_longer_than_the_backend_holds_keep_two_kernels():
    """Rows of more than the backend's ``mixed_order_rnumel`` values: no mixed kernel."""

    class Narrow(TritonBackend):
        capabilities = dataclasses.replace(TritonBackend.capabilities, mixed_order_rnumel=64)

    inputs = _layer_norm_inputs((512, 128), torch.float32)
    fn = _layer_norm_backward(128)
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    cg = loop_ir.compile_graph(gm, list(inputs), Narrow(), loop_ir.LoopIROptions(split_programs=64))
    assert not _mixed(cg)
    _check(cg, fn, inputs)
