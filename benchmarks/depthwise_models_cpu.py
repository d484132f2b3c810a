"""Real timm models whose depthwise convolutions take codegen-triton's strip kernel
(``torchkiln::conv_depthwise``), on the CPU: the kernel registered for the CPU and run by
Triton's interpreter, ``channels_last`` and ``depthwise_convolutions`` "always". Each model is
compiled at batch 1 and 64x64 in float32 and its output compared with eager's; printed: the
largest difference over the output's magnitude, the convolutions sent to the kernel, fallbacks
and graphs. Needs timm.

    TRITON_INTERPRET=1 python benchmarks/depthwise_models_cpu.py convnext_atto mixnet_s ...
"""

from __future__ import annotations

import argparse
import time

import timm
import torch
import torchkiln
from torchkiln_codegen_triton._depthwise import conv_depthwise
from torchkiln_loop_ir import channels_last as CL

OPTIONS = {
    "strict": True,
    "graph_cache": False,
    "codegen": "triton",
    "loop_ir": {
        "channels_last": "always",
        "depthwise_convolutions": "always",
        "mkldnn_convolution": False,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    CL.register_depthwise_kernel("cpu", conv_depthwise)
    for name in args.models:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
        x = torch.randn(1, 3, args.size, args.size)
        start = time.perf_counter()
        try:
            compiled = torchkiln.compile(model, options=OPTIONS)
            with torch.no_grad():
                got, expected = compiled(x), model(x)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        err = ((got - expected).abs().max() / expected.abs().max()).item()
        report = torchkiln.report(compiled)
        lines = [line for g in report.graphs for line in g.convolutions]
        print(
            f"{name}: rel err {err:.1e}, depthwise {sum('depthwise' in ln for ln in lines)}, "
            f"fallbacks {sum(len(g.fallbacks) for g in report.graphs)}, graphs "
            f"{len(report.graphs)}, {time.perf_counter() - start:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
