"""Which operand layouts make cuBLAS pick its fast kernels for unaligned GEMMs (a language model
head of vocabulary 50257 or 30522 in bfloat16, forward and both gradients): a diagnosis for
loop-ir's pad_mm.py, run on the GPU (ms per product, CUDA events, median of 20).

    python3 benchmarks/gpu_mm_layouts.py
"""

from __future__ import annotations

import torch


def ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def pad_to(n: int, align: int = 8) -> int:
    return -(-n // align) * align


def main() -> None:
    for rows, width, vocab in ((8192, 768, 50257), (8192, 768, 30522)):
        compare(rows, width, vocab)


def compare(rows: int, width: int, vocab: int) -> None:
    """Time each layout of the head's three products at one size and print the table."""
    dt = torch.bfloat16
    vp = pad_to(vocab)
    h = torch.randn(rows, width, device="cuda", dtype=dt)
    w = torch.randn(vocab, width, device="cuda", dtype=dt)
    g = torch.randn(rows, vocab, device="cuda", dtype=dt)
    wp = torch.nn.functional.pad(w, (0, 0, 0, vp - vocab))
    gp = torch.nn.functional.pad(g, (0, vp - vocab))
    out = torch.empty(rows, vp, device="cuda", dtype=dt)
    wt = w.t().contiguous()
    cases = {
        "fwd h @ w.t() (as traced)": lambda: h @ w.t(),
        "fwd h @ w.t().contiguous() (copy per call)": lambda: h @ w.t().contiguous(),
        "fwd h @ wt (row-major weight, no copy)": lambda: h @ wt,
        "fwd h @ pad(w).t() [:, :V] (padded)": lambda: (h @ wp.t())[:, :vocab],
        "fwd pad + mm + slice + contiguous": lambda: (
            h @ torch.nn.functional.pad(w, (0, 0, 0, vp - vocab)).t()
        )[:, :vocab].contiguous(),
        "fwd mm(out=padded[:, :V])": lambda: torch.mm(h, w.t(), out=out[:, :vocab]),
        "dgrad g @ w (as traced)": lambda: g @ w,
        "dgrad pad(g) @ pad(w)": lambda: gp @ wp,
        "dgrad pad(g) @ pad(w), pads per call": lambda: (
            torch.nn.functional.pad(g, (0, vp - vocab))
            @ torch.nn.functional.pad(w, (0, 0, 0, vp - vocab))
        ),
        "wgrad g.t() @ h (as traced)": lambda: g.t() @ h,
        "wgrad g.t().contiguous() @ h": lambda: g.t().contiguous() @ h,
        "wgrad pad(g).t() @ h [:V]": lambda: (gp.t() @ h)[:vocab],
    }
    print(f"=== {rows}x{width} @ vocab {vocab} (padded {vp}), bfloat16")
    for name, fn in cases.items():
        print(f"  {ms(fn):7.3f} ms  {name}")


if __name__ == "__main__":
    main()
