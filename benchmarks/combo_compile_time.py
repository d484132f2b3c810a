"""Triton's compile time (sm_90, on a machine without a GPU) of a combo kernel of N bfloat16
casts of distinct sizes, against the N kernels apart (loop-ir's ``combo_kernels`` "always"
and "never"). Session 37 chose codegen-triton's ``COMBO_MEMBERS`` (16) and the flat ``if``
dispatch from it (the machine's two cores busy with a fuzz run)::

    python benchmarks/combo_compile_time.py 16
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"  # before triton is imported: @triton.jit compiles
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # every compile cold

import torch  # noqa: E402
import torchkiln_loop_ir as loop_ir  # noqa: E402
import triton  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torchkiln_codegen_triton import TritonBackend, TritonOptions  # noqa: E402
from torchkiln_codegen_triton.backend import render_kernel  # noqa: E402

SIG = {torch.float32: "*fp32", torch.bfloat16: "*bf16"}


class _Captured(Exception):
    pass


class _Capture(TritonBackend):
    """Renders the graph's kernels and stops."""

    def compile_kernels(self, specs):
        self.rendered = [(spec, *render_kernel(spec, self.options)) for spec in specs]
        raise _Captured


def compile_seconds(spec, name: str, source: str, cfg) -> float:
    """Seconds ``triton.compile`` takes for the kernel for sm_90."""
    path = os.path.join(tempfile.mkdtemp(), "kernel.py")
    with open(path, "w") as f:
        f.write(source)
    module_spec = importlib.util.spec_from_file_location(f"tk_compile_{name}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    fn = getattr(module, name)
    consts = {"XBLOCK": cfg.xblock}
    signature, attrs = {}, {}
    for i, param in enumerate(fn.arg_names):
        if i < len(spec.args):
            signature[param] = SIG[spec.buffers[spec.args[i]].dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[param] = "constexpr" if param in consts else "i32"
    source_ = triton.compiler.ASTSource(fn, signature, constexprs=consts, attrs=attrs)
    target = triton.backends.compiler.GPUTarget("cuda", 90, 32)
    start = time.perf_counter()
    triton.compile(source_, target=target, options=cfg.compile_options)
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
