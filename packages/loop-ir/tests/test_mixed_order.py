"""Mixed-order reductions (mixed_order.py, group_plan.py): a layer norm backward's column sums
split into chunks of rows, one a program of the row reduction's kernel, and fused into it where
the backend says it can emit such a kernel; the schedule only (the numbers: codegen-triton's
test_mixed_order.py, which runs them)."""

from __future__ import annotations

import pytest
import sympy
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_loop_ir.backend import BackendCapabilities
from torchkiln_loop_ir.compile import schedule
from torchkiln_loop_ir.graph import lower
from torchkiln_loop_ir.indexing import ROW_PROGRAM
from torchkiln_loop_ir.mixed_order import _row_programs, narrow_programs

MIXED = BackendCapabilities(
    reduction_broadcast_reduction=True, max_reduction_stages=8, mixed_order_rnumel=4096
)


def _layer_norm_backward(g, x, mean, rstd, w):
    return torch.ops.aten.native_layer_norm_backward(
        g, x, [x.shape[-1]], mean, rstd, w, w, [True, True, True]
    )


def _scheduled(shape, caps=MIXED, **options):
    width = shape[-1]
    x, g, w = torch.randn(shape), torch.randn(shape), torch.randn(width)
    _, mean, rstd = torch.native_layer_norm(x, [width], w, w, 1e-5)
    inputs = (g, x, mean, rstd, w)
    gm = make_fx(_layer_norm_backward, decomposition_table=L.decompositions())(*inputs)
    opts = L.LoopIROptions(**({"split_programs": 64} | options))
    return schedule(lower(gm, list(inputs), opts, caps), caps, opts)


def _kernels(sched):
    return [s for s in sched.steps if hasattr(s, "row_programs")]


@pytest.mark.parametrize("shape", [(512, 128), (4, 96, 200)])
def test_column_partials_share_the_row_kernel(shape):
    kernels = _kernels(_scheduled(shape))
    mixed = [k for k in kernels if k.row_programs]
    assert len(mixed) == 1
    spec = mixed[0]
    rows = int(torch.tensor(shape[:-1]).prod())
    assert rows % spec.row_programs == 0
    across = [n for st in spec.stages for n in st.nodes if n.across_rows]
    assert len(across) == 2
    # each partial is stored at (program, column): one row of partials a program
    partials = [spec.buffers[n.buffer] for n in across]
    assert all(tuple(b.size) == (spec.row_programs, shape[-1]) for b in partials)
    assert ROW_PROGRAM not in spec.size_args
    # and summed by one more kernel over the programs
    finals = [k for k in kernels if k.rranges == (sympy.Integer(spec.row_programs),)]
    assert len(finals) == 1


def _with_bias_grad(g, x, mean, rstd, w):
    dx, dw, db = _layer_norm_backward(g, x, mean, rstd, w)
    return dx, dw, db, dx.sum(0)


@pytest.mark.parametrize(("option", "across"), [(True, 3), ("loaded", 2)])
def test_column_sums_of_the_computed_gradient_join_by_default(option, across):
    """The column sums of the layer norm's input gradient (a value the row kernel computes
    from its row sums, not one it loads) are a third partial of the row kernel by default,
    and keep a split of their own under ``mixed_order_reductions="loaded"``."""
    x, g, w = torch.randn(512, 128), torch.randn(512, 128), torch.randn(128)
    _, mean, rstd = torch.native_layer_norm(x, [128], w, w, 1e-5)
    inputs = (g, x, mean, rstd, w)
    gm = make_fx(_with_bias_grad, decomposition_table=L.decompositions())(*inputs)
    opts = L.LoopIROptions(split_programs=64, mixed_order_reductions=option)
    kernels = _kernels(schedule(lower(gm, list(inputs), opts, MIXED), MIXED, opts))
    (spec,) = [k for k in kernels if k.row_programs]
    assert len([n for st in spec.stages for n in st.nodes if n.across_rows]) == across
    dx = [n for n, b in spec.buffers.items() if tuple(b.size) == (512, 128) and n in spec.outputs]
    readers = [k.name for k in kernels if set(k.inputs) & set(dx)]
    assert bool(readers) == (across == 2)  # no kernel reads the gradient again


def test_mixed_order_option_rejects_other_values():
    with pytest.raises(ValueError, match="mixed_order_reductions"):
        L.LoopIROptions(mixed_order_reductions="always")


def test_backend_without_mixed_order_keeps_the_column_kernel():
    caps = BackendCapabilities(reduction_broadcast_reduction=True, max_reduction_stages=8)
    kernels = _kernels(_scheduled((512, 128), caps))
    assert not any(k.row_programs for k in kernels)
    assert any(len(k.xranges) == 2 for k in kernels)  # the column partials' own kernel


def test_option_off_keeps_the_column_kernel():
    kernels = _kernels(_scheduled((512, 128), mixed_order_reductions=False))
    assert not any(k.row_programs for k in kernels)


@pytest.mark.parametrize(
    ("rows", "target", "expected"),
    [(32768, 528, 512), (8192, 528, 512), (12608, 528, 394), (509, 528, 0), (1024, 0, 0)],
)
def test_row_programs_divide_the_rows(rows, target, expected):
    assert _row_programs(rows, target) == expected


@pytest.mark.parametrize(
    ("width", "expected"),
    [(96, 2112), (192, 2112), (256, 2112), (384, 1056), (512, 1056), (768, 528), (1024, 528)],
)
def test_narrow_rows_aim_for_more_programs(width, expected):
    assert narrow_programs(width, 528, 4) == expected
    assert narrow_programs(width, 528, 1) == 528


@pytest.mark.parametrize(("scale", "programs"), [(1, 64), (4, 256)])
def test_narrow_rows_kernel_runs_the_scaled_programs(scale, programs):
    """Rows of 128 take four times the 64 target programs by default; a scale of 1 keeps the
    target (the column partials then have one row a program either way)."""
    kernels = _kernels(_scheduled((1024, 128), mixed_order_narrow_programs=scale))
    (spec,) = [k for k in kernels if k.row_programs]
    assert spec.row_programs == programs
    partials = [spec.buffers[n.buffer] for st in spec.stages for n in st.nodes if n.across_rows]
    assert all(tuple(b.size) == (programs, 128) for b in partials)


def test_rows_dividing_only_into_the_target_keep_it():
    """Rows that the scaled target's chunks do not divide into enough of (509 * 2 rows: 509
    chunks are fewer than a quarter of 4 * 528) fall back to the target's own chunks."""
    assert _row_programs(1018, narrow_programs(128, 528, 4)) == 0
    assert _row_programs(1018, 528) == 509


def test_narrow_programs_option_rejects_zero():
    with pytest.raises(ValueError, match="mixed_order_narrow_programs"):
        L.LoopIROptions(mixed_order_narrow_programs=0)
