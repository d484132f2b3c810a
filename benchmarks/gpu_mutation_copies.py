"""Device copies of mutated inputs per training step, with and without loop-ir writing them in
place (batch norm's running statistics): a timm model's forward + backward on CUDA, the
``cudaMemcpyAsync`` calls of one step counted by torch.profiler, aot-partition's write-back
counts (``mutation.WRITE_BACK``), the mean step time, and the running statistics against eager's
after the same steps.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python benchmarks/gpu_mutation_copies.py \
        resnet50 64
"""

from __future__ import annotations

import copy
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile


def run(name: str, batch: int, in_place: bool) -> None:
    import timm
    import torchkiln
    import torchkiln_loop_ir.in_place as ip
    from torchkiln_aot_partition.mutation import WRITE_BACK

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).cuda().train()
    ref = copy.deepcopy(model)
    saved = ip.requested_in_place
    if not in_place:
        ip.requested_in_place = lambda gm, backend: ()
    try:
        compiled = torchkiln.compile(model, options={"graph_cache": False})
        inputs = [torch.randn(batch, 3, 224, 224, device="cuda") for _ in range(3)]
        start = time.perf_counter()
        for x in inputs:  # compiles forward, then backward
            compiled(x).float().mean().backward()
            ref(x).float().mean().backward()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
    finally:
        ip.requested_in_place = saved
    stats = max(
        float((b.float() - c.float()).abs().max() / c.float().abs().max().clamp_min(1e-6))
        for b, c in zip(model.buffers(), ref.buffers())
    )
    x = inputs[0]
    before = (WRITE_BACK.copies, WRITE_BACK.in_place)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compiled(x).float().mean().backward()
        torch.cuda.synchronize()
    copies = (WRITE_BACK.copies - before[0], WRITE_BACK.in_place - before[1])
    memcpy = sum(e.count for e in prof.key_averages() if "cudaMemcpyAsync" in e.key)
    launches = sum(e.count for e in prof.key_averages() if "LaunchKernel" in e.key)
    for _ in range(5):
        compiled(x).float().mean().backward()
    torch.cuda.synchronize()
    steps = 20
    start = time.perf_counter()
    for _ in range(steps):
        compiled(x).float().mean().backward()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / steps * 1e3
    print(
        f"{name} batch {batch} in_place={in_place}: cudaMemcpyAsync/step {memcpy}, "
        f"kernel launch calls/step {launches}, write-back (copies, in place) {copies}, "
        f"step {ms:.2f} ms, running stats vs eager after 3 steps (max rel. diff) {stats:.2e}, "
        f"compile+3 steps {compile_s:.0f} s",
        flush=True,
    )


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet50"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    for in_place in (True, False):
        run(name, batch, in_place)
