"""Whether GELU's backward in bfloat16 (81% of 4.3 TB/s on the H200, eager 81%, torch.compile
72%) is held back by its erf: hand-written Triton kernels of ``g * (cdf(x) + x * pdf(x))`` with
libdevice's ``erff`` (``tl.erf``, what the generated kernel calls) against an erf of two ranges
evaluated without selecting coefficients, each timed alone on the same tensors.

Offline (Triton 3.6, sm_90) the generated kernel takes 47.5 instructions a value, against about
45 that the bandwidth allows for two reads and a write. libdevice's ``erff`` evaluates one
polynomial whose coefficients it selects per value by range (13 moves a value); an FFMA takes an
immediate addend, so evaluating both ranges' polynomials with their coefficients inline needs
no moves and no selects but the result's:

- ``|x| <= T`` (T = 0.921875): ``erf(x) = x + x * P(x^2)``, P of degree 5;
- above: ``erf(x) = sign(x) * (1 - exp(Q(min(|x|, 4))))``, Q of degree 8 fitting
  ``log(erfc(t))`` (erfc(4) is below float32's half ulp of 1).

The coefficients are fitted here (``fit``: least squares on Chebyshev nodes in float64,
reweighted towards the largest error, Lawson's iteration) and written into the kernel rounded to
float32; ``--check-fit`` refits and compares. Emulated in float32 with one rounding per FFMA the
erf is within 1.03 ulp of float64's over [-5, 5] (libdevice claims under 1 ulp); the GPU's
``ex2.approx`` adds its own error in the upper range.

A third variant also takes both exps (the erf's upper range and the pdf's) as one
``ex2.approx.ftz`` each (``_exp_ftz``: ``tl.exp2`` of a product by log2(e)): ``tl.exp`` keeps
results below float32's normal range, at a compare and two multiplies more a value. Flushing them changes
GELU's backward only where ``|x| > 13``, by less than 1e-36.

Offline, ``--offline`` with Triton 3.6 for sm_90 (session 27), SASS instructions a value of the
GELU-backward kernel (2048 values a program, 4 warps): bf16 48.0 (libdevice), 45.0 (two
ranges), 39.0 (two ranges, exp ftz; 46 registers); fp32 45.5, 43.0, 37.0. Not yet timed on a
GPU. The exp alone is a lead for generated kernels too: ``tl.exp`` costs three instructions a
value more than ``tl.exp2`` of the product.

Printed: microseconds and % of 4.3 TB/s (two reads and a write) for each variant and dtype,
and each erf's largest error in ulp against float64 on a dense grid (the interpreter's check:
1.05 ulp for the two ranges, 1.46 with ``tl.exp2``, 0.50 for numpy's erf). ``--offline`` compiles the GELU-backward
kernels for sm_90 and prints registers and SASS instructions a value (no GPU needed; run it
with the device's Triton, see ``triton_kernel_resources.py``).

    python3 benchmarks/gpu_erf_probe.py [--json out.json]
    python3 benchmarks/gpu_erf_probe.py --offline
    TRITON_INTERPRET=1 python3 benchmarks/gpu_erf_probe.py --device cpu   # a check only
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

PEAK = 4.3e12
T = 0.921875
#: the kernels' FAST: which erf (and exp) each variant computes with
_VARIANTS = {0: "libdevice", 1: "two ranges", 2: "two ranges, exp ftz"}
#: the fitted coefficients, rounded to float32 (``fit``), which the kernel reads: P's (lowest
#: degree first, P(0) = 2 / sqrt(pi) - 1) and Q's
P0, P1, P2, P3, P4, P5 = (
    tl.constexpr(c)
    for c in (
        0.12837915122509003,
        -0.37612494826316833,
        0.1128181740641594,
        -0.026766641065478325,
        0.004993210081011057,
        -0.0005990979261696339,
    )
)
Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7, Q8 = (
    tl.constexpr(c)
    for c in (
        0.00029427994741126895,
        -1.130131483078003,
        -0.6319953203201294,
        -0.10992520302534103,
        0.02633555233478546,
        -0.004730285611003637,
        0.0005907160229980946,
        -4.5354670874075964e-05,
        1.6024941942305304e-06,
    )
)
P_COEFFS = tuple(c.value for c in (P0, P1, P2, P3, P4, P5))
Q_COEFFS = tuple(c.value for c in (Q0, Q1, Q2, Q3, Q4, Q5, Q6, Q7, Q8))


def _lawson(f, points, degree, variable, relative, iterations=60):
    """Coefficients (lowest first) of a polynomial in ``variable(points)`` close to ``f(points)``
    in the largest (relative or absolute) error: weighted least squares, each weight multiplied
    by its point's error after each solve."""
    v, y = variable(points), f(points)
    a = np.vander(v, degree + 1, increasing=True)
    scale = np.abs(y) if relative else np.ones_like(y)
    w = np.ones_like(v)
    for _ in range(iterations):
        root = np.sqrt(w) / scale
        c, *_ = np.linalg.lstsq(a * root[:, None], y * root, rcond=None)
        err = np.abs(a @ c - y) / scale
        w = w * err
        w /= w.sum()
    return c


def fit() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(P, Q) as float32 values (see the module doc)."""

    def f64(v):
        return torch.tensor(v, dtype=torch.float64)

    nodes = np.cos(np.linspace(0, np.pi, 20001))
    xs = nodes * T / 2 + T / 2
    xs = xs[xs > 1e-4]
    p = _lawson(lambda x: torch.erf(f64(x)).numpy() / x, xs, 5, lambda x: x * x, True)
    p[0] -= 1.0  # erf(x) = x + x * (P(x^2) - 1): the leading 1 is exact
    ts = nodes * (4 - T) / 2 + (4 + T) / 2
    q = _lawson(lambda t: np.log(torch.special.erfc(f64(t)).numpy()), ts, 8, lambda t: t, False)
    return tuple(float(np.float32(c)) for c in p), tuple(float(np.float32(c)) for c in q)


@triton.jit
def _exp_ftz(x):
    """exp(x) as ``tl.exp2(x * log2(e))``: one ``ex2.approx.ftz`` (MUFU.EX2), results below
    float32's normal range flushed to zero; ``tl.exp``'s ``ex2.approx`` keeps them, at a compare
    and two multiplies more a value."""
    return tl.exp2(x * 1.4426950408889634)


@triton.jit
def _exp_of(x, FTZ: tl.constexpr):
    if FTZ:
        return _exp_ftz(x)
    else:
        return tl.exp(x)


@triton.jit
def _erf_two_ranges(x, FTZ: tl.constexpr = False):
    t = tl.abs(x)
    s = x * x
    p = P5 * s + P4
    p = p * s + P3
    p = p * s + P2
    p = p * s + P1
    p = p * s + P0
    low = x * p + x
    u = tl.minimum(t, 4.0)
    q = Q8 * u + Q7
    q = q * u + Q6
    q = q * u + Q5
    q = q * u + Q4
    q = q * u + Q3
    q = q * u + Q2
    q = q * u + Q1
    q = q * u + Q0
    high = 1.0 - _exp_of(q, FTZ)
    high = tl.where(x < 0, -high, high)
    return tl.where(t > 0.921875, high, low)


@triton.jit
def _erf_of(x, FAST: tl.constexpr):
    """FAST 0: libdevice's; 1: the two ranges; 2: the two ranges with ``_exp_ftz``."""
    if FAST == 0:
        return tl.erf(x)
    else:
        return _erf_two_ranges(x, FAST == 2)


@triton.jit
def _gelu_backward(g_ptr, x_ptr, out_ptr, n, BLOCK: tl.constexpr, FAST: tl.constexpr):
    """out = g * (0.5 * (1 + erf(x / sqrt(2))) + x * exp(-x^2 / 2) / sqrt(2 pi)), as the
    generated kernel computes it (float32 inside)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask, other=0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask, other=0).to(tl.float32)
    cdf = (_erf_of(x * 0.7071067811865476, FAST) + 1.0) * 0.5
    pdf = _exp_of(x * x * -0.5, FAST == 2) * 0.3989422804014327
    tl.store(out_ptr + offs, (g * (cdf + x * pdf)).to(out_ptr.dtype.element_ty), mask)


@triton.jit
def _erf_only(x_ptr, out_ptr, n, BLOCK: tl.constexpr, FAST: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _erf_of(tl.load(x_ptr + offs, mask, other=0), FAST), mask)


def _launch(kernel, n: int, *args, fast: int, block: int) -> None:
    kernel[(triton.cdiv(n, block),)](*args, n, BLOCK=block, FAST=fast, num_warps=4)


def max_ulp_error(device: str, fast: int, points: int) -> tuple[float, float]:
    """(largest error in float32 ulp against float64, at which x) over [-5, 5] and tiny values."""
    dense = torch.linspace(-5, 5, points, dtype=torch.float64)
    tiny = torch.logspace(-30, 0, points // 20, dtype=torch.float64)
    x = torch.cat([dense, tiny, -tiny]).to(torch.float32).to(device)
    out = torch.empty_like(x)
    _launch(_erf_only, x.numel(), x, out, fast=fast, block=1024)
    want = torch.erf(x.double().cpu())
    ulp = torch.from_numpy(np.spacing(want.abs().float().numpy())).double()
    err = (out.double().cpu() - want).abs() / ulp
    i = int(err.argmax())
    return float(err[i]), float(x[i])


def _offline() -> None:
    """Registers and SASS instructions a value of both GELU-backward kernels, for sm_90."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton_kernel_resources import _resources

    block, warps = 2048, 4
    for dtype in ("bf16", "fp32"):
        for fast in _VARIANTS:
            sig = {"g_ptr": f"*{dtype}", "x_ptr": f"*{dtype}", "out_ptr": f"*{dtype}"}
            sig |= {"n": "i32", "BLOCK": "constexpr", "FAST": "constexpr"}
            attrs = {(i,): [["tt.divisibility", 16]] for i in range(4)}
            src = ASTSource(_gelu_backward, sig, {"BLOCK": block, "FAST": fast}, attrs)
            compiled = triton.compile(
                src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
            )
            print(
                f"{dtype} erf {_VARIANTS[fast]:22s}: {_resources(compiled, block // (32 * warps))}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu: TRITON_INTERPRET=1, a check only")
    parser.add_argument("--numel", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--json", default=None)
    parser.add_argument("--offline", action="store_true", help="sm_90 resources, no GPU")
    parser.add_argument("--check-fit", action="store_true", help="refit the coefficients")
    parser.add_argument("--hang-s", type=float, default=170)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    if args.check_fit:
        p, q = fit()
        assert (p, q) == (P_COEFFS, Q_COEFFS), (p, q)
        print("the kernel's coefficients are the fit's")
    if args.offline:
        _offline()
        return
    cuda = args.device == "cuda"
    rows = []
    errors = {}
    for fast, name in _VARIANTS.items():
        err, at = max_ulp_error(args.device, fast, 2_000_001 if cuda else 20_001)
        print(f"erf {name:22s}: largest error {err:.2f} ulp (x = {at:.6g})", flush=True)
        rows.append({"erf": name, "max_ulp": err, "at": at})
        errors[fast] = err
        # libdevice's is within 1 ulp (the interpreter's, numpy's, about as close): ours may
        # add about one more
        assert err < max(2.0, errors[0] + 1.5), f"the {name} erf is {err} ulp off"
    n = args.numel if cuda else 4096
    for dtype in (torch.bfloat16, torch.float32):
        g = torch.randn(n, device=args.device, dtype=dtype)
        x = torch.randn(n, device=args.device, dtype=dtype) * 2
        want = torch.ops.aten.gelu_backward(g.double(), x.double()).float()
        for fast, name in _VARIANTS.items():
            out = torch.empty_like(x)

            def call(out=out, fast=fast, g=g, x=x):
                _launch(_gelu_backward, n, g, x, out, fast=fast, block=2048)

            call()
            tol = 1e-2 if dtype is torch.bfloat16 else 1e-5
            torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)
            if cuda:
                from gpu_bandwidth import queued_ms

                us = 1000 * queued_ms(call, calls=20)
            else:
                us = 0.0
            moved = 3 * n * x.element_size()
            pct = 100 * moved / (us * 1e-6) / PEAK if us else 0.0
            print(f"gelu backward {str(dtype)[6:]:8s} erf {name:22s} {us:8.1f} us {pct:5.1f}%")
            rows.append({"dtype": str(dtype), "erf": name, "us": round(us, 1), "pct": pct})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"numel": n, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
