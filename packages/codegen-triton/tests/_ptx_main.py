"""Compile the softmax over rows of 50257 for an H100/H200 (sm_90) on a machine without one and
count its global memory instructions and registers, with and without the aligned walk
(``_aligned.py``), and in bfloat16 held whole (``TritonOptions.walked_rows_whole``); run
as a script by test_aligned_rows.py (Triton must compile for real: a fresh process, not the test
process's interpreter). Prints one JSON line: per dtype, per form, the vector (``.v2``/``.v4``)
and scalar loads and stores in the PTX, the binary's registers a thread and spill bytes (-1
without cuobjdump), its warps and register cap. Exit code 77 (a skip) when this Triton cannot compile
the plain kernel for sm_90 here; a walk that fails to compile where the plain kernel compiles is
an error.

    python _ptx_main.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "0"  # before triton is imported: @triton.jit compiles
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # binaries of a throwaway compile

import torch  # noqa: E402
import torchkiln_loop_ir as loop_ir  # noqa: E402
import triton  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torchkiln_codegen_triton import TritonBackend, TritonOptions  # noqa: E402
from torchkiln_codegen_triton.backend import render_kernel  # noqa: E402

SIG = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16"}
PATTERNS = {
    "vector_loads": r"ld\.global[\.\w:]*\.v[248]\.",
    "scalar_loads": r"ld\.global(?![\.\w:]*\.v[248]\.)[\.\w:]*\.b(16|32) ",
    "vector_stores": r"st\.global[\.\w:]*\.v[248]\.",
    "scalar_stores": r"st\.global(?![\.\w:]*\.v[248]\.)[\.\w:]*\.b(16|32) ",
}


class _Captured(Exception):
    pass


class _Capture(TritonBackend):
    """Renders the graph's kernels and stops (no launcher is needed, only the sources)."""

    def compile_kernels(self, specs):
        self.rendered = [(spec, *render_kernel(spec, self.options)) for spec in specs]
        raise _Captured


def _ptx(spec, name: str, source: str, cfg) -> str:
    path = os.path.join(tempfile.mkdtemp(), "kernel.py")
    with open(path, "w") as f:
        f.write(source)
    module_spec = importlib.util.spec_from_file_location(f"tk_ptx_{name}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    fn = getattr(module, name)
    blocks = {"XBLOCK": cfg.xblock, "RBLOCK": cfg.rblock}
    consts = {k: v for k, v in blocks.items() if k in fn.arg_names}  # a pointwise kernel: XBLOCK
    signature, attrs = {}, {}
    for i, param in enumerate(fn.arg_names):
        if i < len(spec.args):  # tensors: 16-byte aligned, as allocations are
            signature[param] = SIG[spec.buffers[spec.args[i]].dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[param] = "constexpr" if param in consts else "i32"
    source = triton.compiler.ASTSource(fn, signature, constexprs=consts, attrs=attrs)
    target = triton.backends.compiler.GPUTarget("cuda", 90, 32)
    return triton.compile(source, target=target, options=cfg.compile_options).asm


def _registers(cubin: bytes) -> tuple[int, int]:
    """Registers a thread and local (spill) bytes of a cubin, by Triton's own cuobjdump; (-1,
    -1) when this Triton has none."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return -1, -1
    path = os.path.join(tempfile.mkdtemp(), "kernel.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True).stdout
    regs, local = re.search(r"REG:(\d+)", out), re.search(r"LOCAL:(\d+)", out)
    return (int(regs[1]) if regs else -1), (int(local[1]) if local else -1)


def main() -> None:
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(7, 50257, dtype=dtype)
        gm = make_fx(
            lambda x: (torch.softmax(x, -1),), decomposition_table=loop_ir.decompositions()
        )(x)
        forms = [("plain", False, 0), ("walk", True, 0)]
        if dtype == torch.bfloat16:
            forms.append(("whole", True, 65536))  # TritonOptions.walked_rows_whole
        for form, aligned, whole in forms:
            backend = _Capture(
                TritonOptions(aligned_rows=aligned, compile_workers=0, walked_rows_whole=whole)
            )
            try:
                loop_ir.compile_graph(gm, [x], backend)
            except _Captured:
                pass
            ((spec, name, source, cfg),) = backend.rendered
            assert ("aligned walk" in source) == aligned, source
            try:
                asm = _ptx(spec, name, source, cfg)
            except Exception as e:  # noqa: BLE001
                if aligned:  # the plain kernel compiled: the walk's kernel is at fault
                    raise
                print(f"cannot compile for sm_90 here: {type(e).__name__}: {str(e)[:200]}")
                sys.exit(77)  # no sm_90 compiler here: the test skips
            row = {k: len(re.findall(p, asm["ptx"])) for k, p in PATTERNS.items()}
            row["registers"], row["spill_bytes"] = _registers(asm["cubin"])
            row["num_warps"], row["maxnreg"], row["rblock"] = cfg.num_warps, cfg.maxnreg, cfg.rblock
            counts.setdefault(str(dtype).split(".")[1], {})[form] = row
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
