"""Bit-for-bit parity with eager of fused 16-bit chains on the GPU: torchkiln's kernels round every
bfloat16 or float16 intermediate as eager does, and a GPU compiler must not fuse the rounding
away (session 19: LLVM's NVPTX backend turned ``bf16(x * s) + b`` into one ``fma.rn.bf16``, 30%
of the values a step off eager's; codegen-triton's ``_tk_rounded`` keeps the rounding).

Each chain is compiled by torchkiln on CUDA and run on fresh random inputs; printed: how many
values differ from eager's at all, and the largest difference in steps of the output dtype (a
subnormal's step is the smallest subnormal).
Exit status 1 when a pointwise chain differs anywhere (the softmax, summed in another order,
may differ by one step).

    python3 benchmarks/gpu_rounding_check.py [--json out.json]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys

import torch
import torchkiln


def _affine(x, s, b):
    return x * s + b


def _two_products(x, s, b):
    return x * s + b * s


def _gelu_residual(x, s, b):
    return torch.nn.functional.gelu(x * s) + b


def _biased_softmax(x, s, b):
    return torch.softmax(x * s + b, -1)


CHAINS = {
    "x * s + b": (_affine, True),
    "x * s + b * s": (_two_products, True),
    "gelu(x * s) + b": (_gelu_residual, False),  # erf's own rounding may differ
    "softmax(x * s + b), rows of 50257": (_biased_softmax, False),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--hang-s", type=float, default=100)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    failed = False
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        eps = torch.finfo(dtype).eps
        for name, (fn, exact) in CHAINS.items():
            width = 50257 if "softmax" in name else 4096

            def make(dtype=dtype, width=width):
                return (
                    torch.randn(16, width, device="cuda", dtype=dtype) * 3,
                    torch.rand(16, 1, device="cuda", dtype=dtype) + 0.5,
                    torch.randn(width, device="cuda", dtype=dtype),
                )

            compiled = torchkiln.compile(fn)
            differ, steps = 0, 0.0
            for _ in range(3):
                inputs = make()
                got, want = compiled(*inputs), fn(*inputs)
                differ += int((got != want).sum())
                # one step of the output dtype at want: eps * |want|, or the subnormal step
                # (eps * tiny) below the smallest normal (float16's subnormals start at 6e-5,
                # where a softmax over 50257 values has most of its outputs)
                ulp = eps * want.double().abs().clamp_min(torch.finfo(dtype).tiny)
                gap = (got.double() - want.double()).abs() / ulp
                steps = max(steps, float(gap.nan_to_num(0.0).max()))
            bad = exact and differ > 0
            failed |= bad
            rows.append({"dtype": str(dtype)[6:], "chain": name, "differ": differ, "steps": steps})
            flag = "  <- not eager's" if bad else ""
            print(
                f"{str(dtype)[6:]:9s} {name:36s} {differ:8d} values differ, "
                f"at most {steps:.2f} steps{flag}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
