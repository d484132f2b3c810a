"""The matmul template's choice (``_template.py``) without a GPU: the traffic screen on the
products timed on an H100 in session 42, the tiles tried, decisions kept on disk for later
processes, and the interpreter's answer (no timing)."""

from __future__ import annotations

import pytest
import sympy
import torch
from torchkiln_codegen_triton import _template
from torchkiln_codegen_triton.backend import TritonBackend
from torchkiln_codegen_triton.options import TritonOptions
from torchkiln_loop_ir.backend import BufferSpec, KernelSpec, MatmulTemplate


def _spec(name, *size):
    stride, acc = [], 1
    for s in reversed(size):
        stride.insert(0, sympy.Integer(acc))
        acc *= s
    size = tuple(sympy.Integer(s) for s in size)
    return BufferSpec(name, torch.bfloat16, torch.device("cpu"), size, tuple(stride))


def _pair(m, k, n, extra_inputs=0):
    """A product and a pointwise kernel reading it and ``extra_inputs`` others of its size."""
    buffers = {"a": _spec("a", m, k), "b": _spec("b", k, n), "p": _spec("p", m, n)}
    others = [f"in{i}" for i in range(extra_inputs)]
    buffers.update({o: _spec(o, m, n) for o in [*others, "out"]})
    kernel = KernelSpec(
        "kernel0", (sympy.Integer(m * n),), (), (), buffers, ("p", *others), ("out",)
    )
    return MatmulTemplate("p", "a", "b", None, m, n, k), kernel, buffers


@pytest.mark.parametrize(
    ("case", "m", "k", "n", "extra", "share", "timed"),
    [
        ("BERT's intermediate and GELU (tied)", 8192, 768, 3072, 0, 0.52, True),
        ("Llama's gate, SiLU times up (won)", 8192, 1024, 2816, 1, 0.585, True),
        ("BERT's output and residual (lost)", 8192, 3072, 768, 1, 0.195, False),
        ("BERT's intermediate at batch 1 (won)", 512, 768, 3072, 0, 0.52, True),
    ],
)
def test_the_screen_on_the_products_timed(case, m, k, n, extra, share, timed):
    template, kernel, buffers = _pair(m, k, n, extra)
    got = _template.epilogue_share(template, kernel, buffers)
    assert got == pytest.approx(share, abs=0.01), case
    assert (got >= _template.MIN_EPILOGUE_SHARE) is timed, case


def test_tiles_tried():
    template, _, _ = _pair(8192, 768, 3072)
    tiles = _template.tile_candidates(template, torch.bfloat16)
    assert [(t.block_m, t.block_n, t.block_k) for t in tiles] == [(128, 128, 64), (128, 256, 64)]
    small, _, _ = _pair(16, 16, 16)  # both fitted to the same 16 x 16 x 16
    assert len(_template.tile_candidates(small, torch.bfloat16)) == 1
    assert _template.tile_candidates(template, torch.float32)[0].block_k == 32


def test_decisions_are_kept_for_later_processes(tmp_path):
    backend = TritonBackend(TritonOptions(cache_dir=str(tmp_path)))
    tile = _template.Tile(128, 256, 64, 8, 8, 3).items()
    _template._keep(backend, ("text", "layouts"), (tile, "template 1.0 us"))
    _template._keep(backend, ("kept", "layouts"), (None, "not faster: template 2.0 us"))
    _template._keep(backend, ("failed", "layouts"), (None, "the template failed (X): kept"))
    got = _template._kept(backend, ("text", "layouts"))
    assert got is not None and got[0] == tile and "earlier process" in got[1]
    got = _template._kept(backend, ("kept", "layouts"))
    assert got is not None and got[0] is None and got[1].startswith("not faster")
    assert _template._kept(backend, ("failed", "layouts")) is None  # tried again next time
    assert _template._kept(backend, ("other", "layouts")) is None
    entry = next((tmp_path / "templates").glob("*/decision.json"))
    entry.write_text("{damaged")
    assert (
        sum(_template._kept(backend, (k, "layouts")) is not None for k in ("text", "kept")) == 1
    )  # the damaged one is not read


def test_the_interpreter_times_nothing():
    template, kernel, buffers = _pair(8192, 768, 3072)
    from dataclasses import replace

    fused = replace(kernel, template=template)
    answers = _template.choose(TritonBackend(), [(fused, None, kernel)], buffers)
    assert answers == [(None, "templates are timed on a GPU only")]
