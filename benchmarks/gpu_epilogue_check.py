"""cuBLASLt's epilogues on the GPU (loop-ir's cublas_epilogues.py): for the MLP products of the
full-size hf suite, whether ``_addmm_activation``'s GELU is the tanh form, how far its result is
from a float64 reference beside the unfused product's, and the two calls' times.

    python3 benchmarks/gpu_epilogue_check.py [--dtypes bfloat16,float32]

Each row: the product (M x K x N, bias, activation, the weight's layout), the largest error of
each call against float64 (in the output's magnitude), and the best of interleaved batches of
each call (the pass's own measurement, ``_measured``) with CUDA events over 50 calls beside it.
"""

from __future__ import annotations

import argparse
import faulthandler

import torch
from torchkiln_loop_ir import cublas_epilogues as ce

#: (name, M, K, N, bias, activation, weight stored (out, in) as nn.Linear's)
CASES = [
    ("gpt2 c_fc (16x512)", 8192, 768, 3072, True, "gelu_tanh", False),
    ("t5-base wi (16x512)", 8192, 768, 3072, False, "relu", True),
    ("gpt2 c_fc (batch 1)", 512, 768, 3072, True, "gelu_tanh", False),
    ("t5-base wi (batch 1)", 512, 768, 3072, False, "relu", True),
    ("llama-like 8x1024", 8192, 1024, 4096, True, "relu", True),
]


def events_us(fn, calls: int = 50) -> float:
    """Microseconds a call of ``fn``: CUDA events around ``calls`` calls after one warm-up."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--hang-s", type=float, default=100)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
        print(
            f"== {dtype}: _addmm_activation's GELU is the tanh form: {ce.gelu_is_tanh(dev, dtype)}"
        )
        for case in CASES:
            _row(dev, dtype, *case)


def _row(dev, dtype, name, m, k, n, bias, act, out_in) -> None:
    torch.manual_seed(0)
    x = torch.randn(m, k, device=dev, dtype=dtype)
    w = (torch.randn(n, k, device=dev) / k**0.5).to(dtype)
    w = w.t() if out_in else w.t().contiguous()
    b = (torch.randn if bias else torch.zeros)(n, device=dev, dtype=dtype)
    use_gelu = act == "gelu_tanh"

    def ref_act(v):
        return torch.nn.functional.gelu(v, approximate="tanh") if use_gelu else torch.relu(v)

    def unfused():
        return ref_act(torch.addmm(b, x, w) if bias else torch.mm(x, w))

    def fused():
        return torch._addmm_activation(b, x, w, use_gelu=use_gelu)

    ref = ref_act(torch.addmm(b.double(), x.double(), w.double()))
    scale = ref.abs().max().item()
    err_u = (unfused().double() - ref).abs().max().item() / scale
    err_f = (fused().double() - ref).abs().max().item() / scale
    faster, t_u, t_f = ce._measure(x, w, bias, act)
    e_u, e_f = events_us(unfused), events_us(fused)
    print(
        f"{name:24s} {m}x{k}x{n} {'bias ' if bias else ''}{act:9s} "
        f"err unfused {err_u:.2e} fused {err_f:.2e} | pass's timing unfused "
        f"{t_u * 1e6:.1f} us fused {t_f * 1e6:.1f} us -> {'fused' if faster else 'kept'}"
        f" | events unfused {e_u:.1f} us fused {e_f:.1f} us ({e_f / e_u:.3f})"
    )


if __name__ == "__main__":
    main()
