"""Kernels exported by ``export_kernels`` load again with ``load_kernels`` (the graph cache's path
in a new process) and compute the same as eager."""

import torch
from _specs import buf, spec
from torchkiln_codegen_triton import TritonBackend, TritonOptions
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.ops import ops

x0 = index_symbol("x", 0)


def _scale_spec():
    def body(x, r):
        ops.store("out", x[0], ops.mul(ops.load("a", x[0]), ops.constant(3.0, torch.float32)))

    return spec(
        "scale",
        (9,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", torch.float32, (9,)), buf("out", torch.float32, (9,))],
        ["a"],
        ["out"],
    )


def test_exported_kernels_load_and_run(tmp_path):
    first = TritonBackend(TritonOptions(cache_dir=str(tmp_path)))
    (kernel,) = first.compile_kernels([_scale_spec()])
    saved = first.export_kernels([kernel])
    # a fresh backend (as in a new process) rebuilds the kernel from the saved source alone
    (loaded,) = TritonBackend(TritonOptions(cache_dir=str(tmp_path))).load_kernels(
        saved, [_scale_spec()]
    )
    assert loaded.source == kernel.source and loaded.path.startswith(str(tmp_path / "triton"))
    a, out = torch.randn(9), torch.empty(9)
    loaded(a, out)
    torch.testing.assert_close(out, a * 3.0)
