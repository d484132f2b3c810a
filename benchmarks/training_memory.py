"""Saved-for-backward bytes and peak memory of one training step, eager vs torchkiln, on the CPU.

    python benchmarks/training_memory.py --model bert --dtype bf16   (also gpt2; fp32)

BERT / GPT-2 with transformers' default width and 2 layers, batch 2, sequence 128, SDPA attention,
dropout as configured. "saved": the storages autograd saves for the backward beyond parameters and
the batch (``torchkiln_aot_partition.saved_tensor_bytes``); "peak": the most bytes allocated at
once during the call, from the profiler's allocation events (CPU has no max_memory_allocated).
"""

from __future__ import annotations

import argparse

import torch
import torchkiln
import transformers
from torch.profiler import ProfilerActivity, profile
from torchkiln_aot_partition import saved_tensor_bytes


def cpu_peak_bytes(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["bert", "gpt2"], default="bert")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.model == "bert":  # no pooler (as BertForMaskedLM): every output feeds the loss
        model = transformers.BertModel(
            transformers.BertConfig(num_hidden_layers=2, attn_implementation="sdpa"),
            add_pooling_layer=False,
        )
    else:
        model = transformers.GPT2Model(
            transformers.GPT2Config(n_layer=2, use_cache=False, attn_implementation="sdpa")
        )
    model.train()
    ids = torch.randint(0, 1000, (2, 128))

    def loss(m):
        enabled = args.dtype == "bf16"
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            return m(ids).last_hidden_state.float().square().mean()

    def step(m):
        loss(m).backward()
        for p in m.parameters():
            p.grad = None

    compiled = torchkiln.compile(model)
    for name, m in (("eager", model), ("torchkiln", compiled)):
        step(m)  # warm up (compiles)
        out, saved = saved_tensor_bytes(loss, m, held=[*model.parameters(), ids])
        out.backward()
        for p in model.parameters():
            p.grad = None
        del out
        forward_peak = cpu_peak_bytes(lambda m=m: loss(m))
        step_peak = cpu_peak_bytes(lambda m=m: step(m))
        print(
            f"{args.model} {args.dtype} {name:9s} saved {saved.activations / 2**20:7.2f} MB  "
            f"forward peak {forward_peak / 2**20:7.1f} MB  step peak {step_peak / 2**20:7.1f} MB"
        )


if __name__ == "__main__":
    main()
