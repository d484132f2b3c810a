"""The realize policy's decisions on pointwise values read by several consumers, for one bench
model: each (op, consumers, loads, full loads, ops an element, elements, dtype, inlined or
realized) with how often it occurs, the costliest first. What a change to the policy
(loop-ir's ``graph._maybe_realize``, ``inline_cost.py``) would touch beyond the case it was
made for.

    python benchmarks/realize_decisions.py t5_encoder --size full --batch 1 --train
    python benchmarks/realize_decisions.py mobilenet --batch 8 --train --min-ops 8

Session 34, before the CPU's limit of 16 ops an element on a recomputed value: in training, the
small configs of bert, distilbert, gpt2, t5_encoder and llama (batch 32) and of the three conv
models (batch 8) inlined no value of more than 16 ops but int64 index tensors of about 1000
elements (gpt2's and llama's position cat, T5's bucket arithmetic), which the limit now stores;
t5-base at full size inlined its position bias (24 ops, 12 consumers), the one the limit was
for.
"""

from __future__ import annotations

import argparse
import collections

import torch
import torchkiln
from torchkiln.bench import convnets, suites, train
from torchkiln_loop_ir import graph
from torchkiln_loop_ir.inline_cost import count_reads_and_ops
from torchkiln_loop_ir.ir import Pointwise, product

HF_MODELS = ("bert", "distilbert", "gpt2", "t5_encoder", "llama")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=[*sorted(convnets.MODELS), *HF_MODELS])
    parser.add_argument("--size", default="small", choices=("small", "full"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--train", action="store_true", help="a training step (else inference)")
    parser.add_argument("--min-ops", type=int, default=4, help="list values of more ops than this")
    args = parser.parse_args()

    decisions: collections.Counter = collections.Counter()
    decide = graph.GraphLowering._maybe_realize

    def logged(self, n, value):
        out = decide(self, n, value)
        if isinstance(value, Pointwise) and len(n.users) > 1:
            reads, ops, full = count_reads_and_ops(value)
            verdict = "inlined" if out is value else "realized"
            size = str(product(value.ranges))
            decisions[
                (str(n.target), len(n.users), reads, full, ops, size, str(value.dtype), verdict)
            ] += 1
        return out

    graph.GraphLowering._maybe_realize = logged
    if args.model in HF_MODELS:
        spec = next(m for m in suites.hf_suite(args.size) if m.name == args.model)
        model, inputs = spec.build(args.batch)
    else:
        model, inputs = convnets.build(args.model, args.batch)
    model = train._no_dropout(model).train(args.train)
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False})
    if args.train:
        train.loss_of(compiled(*inputs)).backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    print("count  op  consumers  loads  full loads  ops  elements  dtype  decision")
    for key, count in sorted(decisions.items(), key=lambda kv: -kv[0][4]):
        if key[4] > args.min_ops:
            print(count, *key)


if __name__ == "__main__":
    main()
