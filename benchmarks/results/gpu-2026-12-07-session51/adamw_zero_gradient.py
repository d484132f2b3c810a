"""Session 51: the CPU evidence for session 50's float32 "failure" (tests/test_cudagraph_steps.py on an H100).
The default mode (no CUDA graphs) against eager, the same model and AdamW steps as that test:
the convolution's bias, whose gradient is zero in exact arithmetic (batch norm follows), ends
as far from eager's as the H100 run found (1e-3), while its gradient differs by 1e-8.

    .venv/bin/python benchmarks/results/gpu-2026-12-07-session51/adamw_zero_gradient.py
"""

import copy

import torch
import torch.nn as nn
import torchkiln

torch.manual_seed(7)
eager = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    nn.Flatten(),
    nn.Linear(16 * 8 * 8, 10),
)
model = copy.deepcopy(eager)
compiled = torchkiln.compile(model)
eo = torch.optim.AdamW(eager.parameters(), lr=1e-3)
o = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))) for _ in range(6)]
for step, (x, y) in enumerate(batches):
    for m, op in ((eager, eo), (compiled, o)):
        op.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        op.step()
    for (n, p), q in zip(eager.named_parameters(), model.parameters()):
        print(
            step,
            n,
            f"grad {float(p.grad.detach().abs().max()):.2e} graddiff {float((p.grad - q.grad).detach().abs().max()):.2e} pdiff {float((p - q).detach().abs().max()):.2e}",
        )
