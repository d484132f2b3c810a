"""Real Triton kernels on a CUDA GPU: torchkiln-codegen-triton's own tests, run on CUDA tensors.

The package tests build KernelSpecs by hand and compare against eager on fresh random inputs; here
they run with the interpreter off and CUDA as torch's default device, so every tensor they make
(and every kernel) is on the GPU. tests/test_codegen_triton_e2e.py (loop-ir's real compile_graph)
runs the same way. First a launch-overhead check. Prints PASS/FAIL per test and a summary line.

    python benchmarks/gpu_triton_smoke.py            # from the repo root, packages on PYTHONPATH
    python benchmarks/gpu_triton_smoke.py packages/codegen-triton/tests/test_online_softmax.py  # some
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # before triton is imported
ROOT = Path(__file__).resolve().parents[1]


class _Report:
    def __init__(self) -> None:
        self.results: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.results.append((report.nodeid, report.outcome.upper()))


def _autotuned_reduction() -> None:
    """TritonOptions(autotune=True): times a few configs on the first call, then stays correct."""
    import sympy
    import torch
    from torchkiln_codegen_triton import TritonBackend, TritonOptions
    from torchkiln_loop_ir.backend import BufferSpec, KernelNode, KernelSpec, KernelStage
    from torchkiln_loop_ir.ops import ops

    n, m = 4096, 768
    dev = torch.device("cuda")
    bufs = {
        "a": BufferSpec(
            "a",
            torch.float32,
            dev,
            (sympy.Integer(n), sympy.Integer(m)),
            (sympy.Integer(m), sympy.Integer(1)),
        ),
        "out": BufferSpec("out", torch.float32, dev, (sympy.Integer(n),), (sympy.Integer(1),)),
    }

    def body(x, r):
        v = ops.load("a", x[0] * m + r[0])
        ops.store_reduction("out", x[0], ops.reduction(torch.float32, torch.float32, "sum", v))

    spec = KernelSpec(
        "rowsum_tuned",
        (sympy.Integer(n),),
        (sympy.Integer(m),),
        (KernelStage("loop", (KernelNode("out", body, True),)),),
        bufs,
        ("a",),
        ("out",),
    )
    (k,) = TritonBackend(TritonOptions(autotune=True)).compile_kernels([spec])
    before = k.config
    for _ in range(2):
        a, out = torch.randn(n, m, device=dev), torch.empty(n, device=dev)
        k(a, out)
        torch.testing.assert_close(out, a.sum(1), rtol=1e-4, atol=1e-3)
    print(f"PASS: autotuned row sum ({before} -> {k.config})")


def _overhead() -> None:
    import sympy
    import torch
    from torchkiln_codegen_triton import TritonBackend
    from torchkiln_loop_ir.backend import BufferSpec, KernelNode, KernelSpec, KernelStage
    from torchkiln_loop_ir.ops import ops

    n = 1024
    dev = torch.device("cuda")
    size, stride = (sympy.Integer(n),), (sympy.Integer(1),)
    bufs = {b: BufferSpec(b, torch.float32, dev, size, stride) for b in ("a", "b", "out")}

    def body(x, r):
        ops.store("out", x[0], ops.add(ops.load("a", x[0]), ops.load("b", x[0])))

    spec = KernelSpec(
        "add_small",
        size,
        (),
        (KernelStage("loop", (KernelNode("out", body),)),),
        bufs,
        ("a", "b"),
        ("out",),
    )
    (k,) = TritonBackend().compile_kernels([spec])
    a, b, out = (torch.randn(n, device=dev) for _ in range(3))
    k(a, b, out)
    torch.testing.assert_close(out, a + b)
    # relaunches must respect Triton's specialization: 4-byte-aligned views get their own binary
    big = torch.randn(3, n + 1, device=dev)
    for _ in range(2):
        k(big[0, 1:], big[1, 1:], big[2, :n])
        torch.testing.assert_close(big[2, :n], big[0, 1:] + big[1, 1:])
        k(a, b, out)
        torch.testing.assert_close(out, a + b)
    print(f"PASS: relaunch with misaligned views ({len(k._launchers)} specializations cached)")
    _autotuned_reduction()
    for label, fn in (
        ("torchkiln launch", lambda: k(a, b, out)),
        ("eager torch.add", lambda: torch.add(a, b, out=out)),
    ):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(1000):
            fn()
        torch.cuda.synchronize()
        print(
            f"{label}: {(time.perf_counter() - t) * 1e3:.1f} us per call (host-bound, 1024 elems)"
        )


def main() -> int:
    import pytest
    import torch

    if not torch.cuda.is_available():
        print("FAIL: no CUDA device")
        return 1
    import triton

    print(
        f"python {sys.version.split()[0]} torch {torch.__version__} triton {triton.__version__} "
        f"on {torch.cuda.get_device_name()}"
    )
    try:  # first: set_default_device below installs a mode that slows every later torch call
        _overhead()
    except Exception as e:  # noqa: BLE001 - report and go on: this is a smoke script
        print(f"FAIL: overhead check: {type(e).__name__}: {e}")
        return 1
    torch.set_default_device("cuda")
    report = _Report()
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:warnings",
        "--import-mode=importlib",
        *(
            sys.argv[1:]
            or [
                str(ROOT / "packages/codegen-triton/tests"),
                str(ROOT / "tests/test_codegen_triton_e2e.py"),
            ]
        ),
    ]
    pytest.main(args, plugins=[report])
    torch.set_default_device("cpu")
    for nodeid, outcome in report.results:
        print(f"{'PASS' if outcome == 'PASSED' else outcome}: {nodeid}")
    failed = [r for r in report.results if r[1] != "PASSED"]
    print(f"SUMMARY: {len(report.results) - len(failed)} passed, {len(failed)} not passed")
    return 1 if failed or not report.results else 0


if __name__ == "__main__":
    sys.exit(main())
