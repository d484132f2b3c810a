"""Which form of a float32 product (TF32 off: cuBLAS's SIMT kernels, as the benchmark's float32
tables) is fastest for the linear layers of the full-size suites? A diagnosis for the float32
geomean of issue 14, where both compilers call the same cuBLAS kernel for every product.

Each linear layer ``y = x @ W^T + b`` (x row-major [M, K], W [N, K] as nn.Linear keeps it) is
timed in the forms a compiler could emit without changing a value:

- ``linear``: ``F.linear(x, W, b)``, eager's call (cuBLASLt's bias epilogue where it applies);
- ``mm``: ``x @ W.t()`` (no bias);
- ``mm-nn``: ``x @ Wt`` with ``Wt = W.t().contiguous()`` (a weight laid out once, as frozen
  inference could keep it);
- ``mm-t``: ``(W @ x.t()).t()``, the product computed transposed (the output column-major);
- ``mm-nn-t``: ``(Wt.t() @ x.t()).t()``;

each under ``preferred_blas_library`` "cublas" and "cublaslt". Times are CUDA-event medians of
20 calls (ms). The bias-free forms leave the bias to a later kernel (a compiler fuses it into
its consumer), so the last columns compare the best form with ``mm`` (the same work) as well as
with ``linear``.

    python3 benchmarks/gpu_fp32_gemm_forms.py [--only bert,vit] [--reps 20]
"""

from __future__ import annotations

import argparse
import faulthandler
import math

import torch
import torch.nn.functional as F
from gpu_mm_layouts import ms  # (the script's folder is on sys.path)

#: (model, layer) -> (M, N, K, bias): the suites' full-size linear layers (batch x sequence rows)
SHAPES: dict[tuple[str, str], tuple[int, int, int, bool]] = {
    ("bert", "attention 768->768"): (16 * 512, 768, 768, True),
    ("bert", "ffn 768->3072"): (16 * 512, 3072, 768, True),
    ("bert", "ffn 3072->768"): (16 * 512, 768, 3072, True),
    ("bert", "decoder 768->30522"): (16 * 512, 30522, 768, True),
    ("distilbert", "attention 768->768"): (32 * 512, 768, 768, True),
    ("distilbert", "ffn 768->3072"): (32 * 512, 3072, 768, True),
    ("distilbert", "ffn 3072->768"): (32 * 512, 768, 3072, True),
    ("gpt2", "c_attn 768->2304"): (16 * 512, 2304, 768, True),
    ("gpt2", "lm_head 768->50257"): (16 * 512, 50257, 768, False),
    ("t5", "attention 768->768"): (16 * 512, 768, 768, False),
    ("t5", "ffn 768->3072"): (16 * 512, 3072, 768, False),
    ("t5", "ffn 3072->768"): (16 * 512, 768, 3072, False),
    ("llama", "attention 1024->1024"): (8 * 1024, 1024, 1024, False),
    ("llama", "mlp 1024->2816"): (8 * 1024, 2816, 1024, False),
    ("llama", "mlp 2816->1024"): (8 * 1024, 1024, 2816, False),
    ("llama", "lm_head 1024->32000"): (8 * 1024, 32000, 1024, False),
    ("vit", "qkv 768->2304"): (64 * 197, 2304, 768, True),
    ("vit", "proj 768->768"): (64 * 197, 768, 768, True),
    ("vit", "fc1 768->3072"): (64 * 197, 3072, 768, True),
    ("vit", "fc2 3072->768"): (64 * 197, 768, 3072, True),
    ("convnext", "stage1 fc1 96->384"): (64 * 56 * 56, 384, 96, True),
    ("convnext", "stage1 fc2 384->96"): (64 * 56 * 56, 96, 384, True),
    ("convnext", "stage3 fc1 384->1536"): (64 * 14 * 14, 1536, 384, True),
    ("convnext", "stage3 fc2 1536->384"): (64 * 14 * 14, 384, 1536, True),
}

FORMS = ("linear", "mm", "mm-nn", "mm-t", "mm-nn-t")


def forms(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> dict[str, object]:
    wt = w.t().contiguous()
    xt = x.t()
    return {
        "linear": lambda: F.linear(x, w, b),
        "mm": lambda: x @ w.t(),
        "mm-nn": lambda: x @ wt,
        "mm-t": lambda: (w @ xt).t(),
        "mm-nn-t": lambda: (wt.t() @ xt).t(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated models (default: all)")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(540, exit=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    only = {m for m in args.only.split(",") if m}
    print(f"card: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    header = ["model", "layer", "M x N x K"]
    header += [f"{f} {lib}" for lib in ("cublas", "lt") for f in FORMS]
    header += ["best", "best / mm", "best / linear"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ratios = []
    for (model, layer), (m, n, k, has_bias) in SHAPES.items():
        if only and model not in only:
            continue
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=gen)
        w = torch.randn(n, k, device="cuda", generator=gen) / math.sqrt(k)
        b = torch.randn(n, device="cuda", generator=gen) if has_bias else None
        reference = F.linear(x.double(), w.double(), None if b is None else b.double())
        row: dict[str, float] = {}
        for lib in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(lib)
            for name, fn in forms(x, w, b).items():
                out = fn()
                if name != "linear" and b is not None:
                    out = out + b  # the bias a compiler would fuse into the next kernel
                err = (out.double() - reference).abs().max().item()
                if err > 1e-3:
                    raise SystemExit(f"{model} {layer} {name} {lib}: max error {err:.2e}")
                row[f"{name} {lib}"] = ms(fn, args.reps)
        torch.backends.cuda.preferred_blas_library("cublas")
        best = min(row, key=row.__getitem__)
        ratio = row[best] / row["mm cublas"]
        ratios.append(ratio)
        cells = [model, layer, f"{m} x {n} x {k}"] + [f"{v:.3f}" for v in row.values()]
        cells += [best, f"{ratio:.3f}", f"{row[best] / row['linear cublas']:.3f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
        del x, w, b, reference
        torch.cuda.empty_cache()
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geomean best / mm over {len(ratios)} layers: {geo:.3f}")


if __name__ == "__main__":
    main()
