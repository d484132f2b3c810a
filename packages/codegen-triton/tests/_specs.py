"""Helpers to hand-build KernelSpecs the way loop-ir's scheduler would."""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch
from torchkiln_loop_ir.backend import BufferSpec, KernelNode, KernelSpec, KernelStage


def contiguous(size: Sequence[object]) -> tuple[sympy.Expr, ...]:
    strides: list[sympy.Expr] = []
    run = sympy.Integer(1)
    for s in reversed(list(size)):
        strides.append(run)
        run = run * sympy.sympify(s)
    return tuple(reversed(strides))


def buf(
    name: str,
    dtype: torch.dtype,
    size: Sequence[object],
    stride: Sequence[object] | None = None,
    offset: object = 0,
) -> BufferSpec:
    size_t = tuple(sympy.sympify(s) for s in size)
    stride_t = tuple(sympy.sympify(s) for s in stride) if stride is not None else contiguous(size_t)
    return BufferSpec(name, dtype, torch.device("cpu"), size_t, stride_t, sympy.sympify(offset))


def spec(name, xranges, rranges, stages, buffers, inputs, outputs, local=(), size_args=()):
    return KernelSpec(
        name=name,
        xranges=tuple(sympy.sympify(r) for r in xranges),
        rranges=tuple(sympy.sympify(r) for r in rranges),
        stages=tuple(
            KernelStage(kind, tuple(KernelNode(b, fn, red) for b, fn, red in nodes))
            for kind, nodes in stages
        ),
        buffers={b.name: b for b in buffers},
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        local_buffers=frozenset(local),
        size_args=tuple(size_args),
    )


def compile_one(k, options=None):
    from torchkiln_codegen_triton import TritonBackend

    (ck,) = TritonBackend(options).compile_kernels([k])
    return ck


def column_reduction(
    name: str, rows: int, cols: int, dtype: torch.dtype = torch.float32, reduction: str = "sum"
):
    """The KernelSpec of ``reduction`` over the rows of a contiguous (rows, cols) ``a`` into
    ``out[cols]`` (an outer reduction: x walks the columns, r the rows; eager's
    ``a.<reduction>(0)``)."""
    from torchkiln_loop_ir.ops import ops

    def body(x, r):
        v = ops.load("a", r[0] * cols + x[0])
        ops.store_reduction("out", x[0], ops.reduction(dtype, dtype, reduction, v))

    return spec(
        name,
        (cols,),
        (rows,),
        [("loop", [("out", body, True)])],
        [buf("a", dtype, (rows, cols)), buf("out", dtype, (cols,))],
        ["a"],
        ["out"],
    )


def compiled_for_gpu(call: str, cache_dir: object) -> list[dict]:
    """Run ``call`` (Python source, e.g. ``"import m; m._main()"``) in a process of its own with
    TRITON_INTERPRET=0, so that @triton.jit compiles for real (for a GPU target Triton names,
    no GPU needed), and return the JSON objects it prints, one a line."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "0", "TORCHKILN_CACHE_DIR": str(cache_dir)}
    env["PYTHONPATH"] = os.pathsep.join([str(here), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", call],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=here,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
