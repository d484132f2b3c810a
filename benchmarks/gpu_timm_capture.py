"""Capture timm models whole (issue 4's GPU check): one graph each, outputs equal to eager.

Run on a machine with timm installed (the GPU machine): ``python3 benchmarks/gpu_timm_capture.py``.
The backend only counts graphs and runs them as captured, so this measures capture alone.
"""

from __future__ import annotations

import sys
import time

import torch

MODELS = (
    "resnet50",
    "mobilenetv3_large_100",
    "vit_base_patch16_224",
    "convnext_tiny",
    "efficientnet_b0",
)


def main() -> int:
    try:
        import timm
    except ImportError:
        print("timm is not installed: nothing to check")
        return 0
    from torchkiln_dynamo_capture import capture

    device = "cuda" if torch.cuda.is_available() else "cpu"
    failures = 0
    for name in MODELS:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval().to(device)
        x = torch.randn(2, 3, 224, 224, device=device)
        graphs = []

        def backend(gm, example_inputs, graphs=graphs):
            graphs.append(gm)
            return gm.forward

        start = time.perf_counter()
        try:
            with torch.no_grad():
                captured = capture(model, backend, fullgraph=True)
                out = captured(x)
                seconds = time.perf_counter() - start
                expected = model(x)
                again = captured(torch.randn_like(x))  # a cache hit: no new graph
                del again
            error = (out - expected).abs().max().item()
            ok = len(graphs) == 1 and torch.allclose(out, expected, rtol=1e-4, atol=1e-4)
            nodes = len(graphs[0].graph.nodes) if graphs else 0
            print(
                f"{'PASS' if ok else 'FAIL'} {name}: graphs={len(graphs)} fx_nodes={nodes} "
                f"max_abs_err={error:.2e} capture_s={seconds:.2f}"
            )
        except Exception as error:  # report and go on to the next model
            ok = False
            print(f"FAIL {name}: {type(error).__name__}: {str(error)[:300]}")
        failures += not ok
    print(f"SUMMARY: {len(MODELS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
