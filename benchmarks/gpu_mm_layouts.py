"""Which operand layouts make cuBLAS pick its fast kernels for unaligned GEMMs (a language model
head of vocabulary 50257 or 30522 in bfloat16 or float32, forward and both gradients): a diagnosis
for loop-ir's pad_mm.py, run on the GPU (ms per product, CUDA events, median of 20). Float32 runs
with TF32 off (full-precision products, as the benchmark's float32 tables) unless --tf32.

    python3 benchmarks/gpu_mm_layouts.py [--dtype bfloat16|float32] [--tf32]
"""

from __future__ import annotations

import argparse

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


def pad_to(n: int, align: int) -> int:
    return -(-n // align) * align


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--tf32", action="store_true", help="float32 products on TF32 tensor cores")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    dt = getattr(torch, args.dtype)
    # GPT-2 (16 x 512 rows), BERT (16 x 512), DistilBERT (32 x 512): the full-size suite's heads
    for rows, width, vocab in ((8192, 768, 50257), (8192, 768, 30522), (16384, 768, 30522)):
        compare(rows, width, vocab, dt)


def compare(rows: int, width: int, vocab: int, dt: torch.dtype) -> None:
    """Time each layout of the head's three products at one size and print the table."""
    from torchkiln_loop_ir.pad_mm import _mm_padded_n

    vp = pad_to(vocab, 16 // torch.empty((), dtype=dt).element_size())
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
        "fwd pad per call + mm (pad_mm's default)": lambda: (
            h @ torch.nn.functional.pad(w, (0, 0, 0, vp - vocab)).t()
        ),
        "fwd mm_padded_n: the aligned columns, then the rest": lambda: _mm_padded_n(
            None, h, w.t(), vp
        ),
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
    tf32 = " (TF32)" if dt == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else ""
    print(f"=== {rows}x{width} @ vocab {vocab} (padded {vp}), {dt}{tf32}")
    for name, fn in cases.items():
        print(f"  {ms(fn):7.3f} ms  {name}")


if __name__ == "__main__":
    main()
