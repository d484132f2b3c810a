"""User-written Triton kernels launched in a captured function (issue 15): ``kernel[grid](...)``
is one graph call (``torchkiln::triton_kernel_launch``), as TorchDynamo makes it one higher-order
node; the tensors the kernel writes are written back, so inputs updated in place end up as in
eager. One graph for each program here, in TorchDynamo too.

Runs on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1`` when triton is imported);
skipped where triton is not installed or the interpreter is off.
"""

from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip(
        "Triton kernels run on CPU tensors only in the interpreter", allow_module_level=True
    )
import triton.language as tl  # noqa: E402
from _conformance_harness import Program, ids, randn, run_program  # noqa: E402


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(
        out_ptr + offs,
        tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
        mask=mask,
    )


@triton.jit
def _scale_inplace(x_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


@triton.jit
def _rowsum(x_ptr, out_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + offs, mask=offs < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(v, axis=0))


def xy() -> tuple:
    return randn(200), randn(200)


def launch_tuple_grid(x, y):
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out * 2


def launch_lambda_grid(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    _add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=64)
    return out.sin()


def _global_grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def launch_global_grid_function(x, y):
    out = torch.zeros_like(x)
    _add[_global_grid](x + 1, y, out, x.numel(), BLOCK=32)
    return out


def launch_keyword_arguments(x, y):
    out = torch.empty_like(x)
    _add[(4,)](x_ptr=x, y_ptr=y, out_ptr=out, n=x.numel(), BLOCK=64)
    return out - y


def launch_writes_input(x, y):
    _scale_inplace[(4,)](x, x.numel(), 0.5, BLOCK=64)
    return x + y


def launch_twice_chained(x, y):
    a = torch.empty_like(x)
    _add[(4,)](x, y, a, x.numel(), BLOCK=64)
    _add[(4,)](a, a, a, a.numel(), BLOCK=64)
    return a


def launch_on_intermediate_then_reduce(x, y):
    t = (x * y).relu()
    _scale_inplace[(4,)](t, t.numel(), 3.0, BLOCK=64)
    return t.sum()


def launch_rowsum_2d(x):
    out = torch.empty(x.shape[0], dtype=x.dtype)
    _rowsum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=16)
    return out + x.mean(1)


def launch_in_helper(x, y):
    def helper(a, b):
        out = torch.empty_like(a)
        _add[(4,)](a, b, out, a.numel(), BLOCK=64)
        return out

    return helper(x, y) * helper(y, x)


PROGRAMS = [
    Program(launch_tuple_grid, xy),
    Program(launch_lambda_grid, xy),
    Program(launch_global_grid_function, xy),
    Program(launch_keyword_arguments, xy),
    Program(launch_writes_input, xy),
    Program(launch_twice_chained, xy),
    Program(launch_on_intermediate_then_reduce, xy),
    Program(launch_rowsum_2d, lambda: (randn(6, 10),)),
    Program(launch_in_helper, xy),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
