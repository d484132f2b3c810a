"""Real timm models whose depthwise convolutions take codegen-triton's strip kernel
(``torchkiln::conv_depthwise``), on the CPU: the kernel registered for the CPU and run by
Triton's interpreter, ``channels_last`` and ``depthwise_convolutions`` "always". Each model is
compiled at batch 1 and 64x64 in float32 and its output compared with eager's; printed: the
largest difference over the output's magnitude, the convolutions sent to the kernel, fallbacks
and graphs. With ``--train``, a training step (batch 2): the output and every parameter's
gradient of the loss ``mean(out ** 2)`` against eager's (the largest difference over the
model's largest gradient), and the input gradients the kernel computed too. Needs timm.

    TRITON_INTERPRET=1 python benchmarks/depthwise_models_cpu.py convnext_atto mixnet_s ...
    TRITON_INTERPRET=1 python benchmarks/depthwise_models_cpu.py --train convnext_atto
"""

from __future__ import annotations

import argparse
import copy
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


def _relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def _largest_difference(grads: list, wanted: list) -> float:
    scale = max(w.abs().max().item() for w in wanted)
    return max((g - w).abs().max().item() for g, w in zip(grads, wanted)) / scale


def _step(model, x) -> tuple[torch.Tensor, list]:
    out = model(x)
    out.square().mean().backward()
    return out.detach(), [p.grad for p in model.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--train", action="store_true", help="a training step, gradients too")
    args = parser.parse_args()
    CL.register_depthwise_kernel("cpu", conv_depthwise)
    for name in args.models:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False)
        model = model.train() if args.train else model.eval()
        reference = copy.deepcopy(model)
        x = torch.randn(2 if args.train else 1, 3, args.size, args.size)
        start = time.perf_counter()
        try:
            compiled = torchkiln.compile(model, options=OPTIONS)
            if args.train:
                (got, grads), (expected, wanted) = _step(compiled, x), _step(reference, x)
            else:
                with torch.no_grad():
                    got, expected = compiled(x), reference(x)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        # over the largest gradient of the model: a bias before a training batch norm (through
        # a 1x1 convolution) has a gradient of zero but for rounding, 1e-9 in both
        grad_err = (
            f", grad err {_largest_difference(grads, wanted):.1e} of the largest gradient"
            if args.train
            else ""
        )
        report = torchkiln.report(compiled)
        lines = [line for g in report.graphs for line in g.convolutions]
        gradients = sum("input gradient a depthwise" in ln for ln in lines)
        print(
            f"{name}: rel err {_relative(got, expected):.1e}{grad_err}, depthwise "
            f"{sum('depthwise conv' in ln for ln in lines)}"
            + (f" (input gradients {gradients})" if args.train else "")
            + f", fallbacks {sum(len(g.fallbacks) for g in report.graphs)}, graphs "
            f"{len(report.graphs)}, {time.perf_counter() - start:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
