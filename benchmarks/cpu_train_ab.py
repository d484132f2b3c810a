"""CPU: an interleaved A/B of torchkiln settings on an hf model's training step: forward,
backward and optimizer step timed apart, every variant once a round, medians over the rounds.

    python benchmarks/cpu_train_ab.py bert \
        '{"lanes": {}, "one_loop": {"cpp": {"x_lanes": 0}}, "eager": "eager", "tc": "tc"}' \
        [--rounds 60] [--batch 32] [--size small|full]

Each variant is ``"eager"``, ``"tc"`` (torch.compile) or a dict of ``LoopIROptions`` fields,
with an optional ``"cpp"`` dict of ``CppOptions`` fields. Session 32 (2 cores, small configs at
batch 32): BERT's backward 16.2 ms with one x-loop around strided reductions, 12.3 ms with
blocks of lanes (codegen-cpp 0.5.4); at full size (bert-base, batch 1 x 512, 3 rounds) 1666 ->
1505 ms, eager 1361. The small Llama's forward took 15.4 ms with its linears grouped and 8.7 ms
with ``{"group_linears": false}``, run on d88ebcc: since loop-ir 0.8.19 training graphs are
never grouped, so that A/B needs the older code.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time

import torch
import torchkiln
from torchkiln.bench import suites, train
from torchkiln_codegen_cpp import CppOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("variants", help="a JSON object: label -> variant")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", default="small", choices=("small", "full"))
    args = parser.parse_args()
    spec = next(s for s in suites.hf_suite(args.size) if s.name == args.model)
    base, inputs = spec.build(args.batch)
    base = train._no_dropout(base).train()
    variants = {}
    for label, opts in json.loads(args.variants).items():
        model = copy.deepcopy(base)
        if opts == "eager":
            fn = model
        elif opts == "tc":
            fn = torch.compile(model)
        else:
            cpp = opts.pop("cpp", None)
            extra = {"cpp_options": CppOptions(**cpp)} if cpp else {}
            fn = torchkiln.compile(model, options={"loop_ir": opts, **extra})
        variants[label] = train.Variant(model, fn, contextlib.nullcontext)
        for _ in range(3):
            variants[label].step(inputs)
    times: dict[str, list[tuple[float, float, float]]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for label, v in variants.items():
            v.model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = train.loss_of(v.fn(*inputs))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            v.optimizer.step()
            t3 = time.perf_counter()
            times[label].append((t1 - t0, t2 - t1, t3 - t2))
    for label, rows in times.items():
        f, b, o = (statistics.median(r[i] for r in rows) * 1e3 for i in range(3))
        print(
            f"{args.model} batch {args.batch} {label:12s} forward {f:7.2f}  backward {b:7.2f}  "
            f"optimizer {o:6.2f}  forward+backward {f + b:7.2f} ms"
        )


if __name__ == "__main__":
    main()
