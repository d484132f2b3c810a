"""Triton's compile time (sm_90, on a machine without a GPU) of a combo kernel of N bfloat16
casts of distinct sizes, against the N kernels apart (loop-ir's ``combo_kernels`` "always"
and "never"). Session 37 chose codegen-triton's ``COMBO_MEMBERS`` (16) and the flat ``if``
dispatch from it (the machine's two cores busy with a fuzz run)::

    python benchmarks/combo_compile_time.py 16
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # before triton is imported: @triton.jit compiles
# the capture and the sm_90 compile of codegen-triton's PTX test (which also sets a throwaway
# Triton cache when imported)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/codegen-triton/tests"))
import torch  # noqa: E402
import torchkiln_loop_ir as loop_ir  # noqa: E402
from _ptx_main import _Capture, _Captured, _ptx  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torchkiln_codegen_triton import TritonOptions  # noqa: E402


def compile_seconds(spec, name: str, source: str, cfg) -> float:
    """Seconds the kernel takes to compile for sm_90."""
    start = time.perf_counter()
    _ptx(spec, name, source, cfg)
    return time.perf_counter() - start


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    weights = [torch.randn(100 + 37 * i, 8 + i % 5) for i in range(n)]
    gm = make_fx(lambda *ws: [w.to(torch.bfloat16) for w in ws])(*weights)
    for mode in ("always", "never"):
        backend = _Capture(TritonOptions(compile_workers=0))
        options = loop_ir.LoopIROptions(combo_kernels=mode)
        try:
            loop_ir.compile_graph(gm, list(weights), backend, options)
        except _Captured:
            pass
        times = [compile_seconds(*r) for r in backend.rendered]
        print(
            f"combo_kernels={mode}: {len(backend.rendered)} kernels, {sum(times):.2f} s in all, "
            f"the longest {max(times):.2f} s"
        )


if __name__ == "__main__":
    main()
