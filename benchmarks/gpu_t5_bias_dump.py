"""T5-base's encoder at full size in bfloat16 (16 x 512) compiled once with the debug dump on:
prints each generated kernel writing a buffer of batch x heads x 512 x 512 elements (the
attention bias the memory-efficient kernel reads) with the wrapper lines around its launch,
to see why it is computed per batch row (session 41's 0.287 ms kernel).

    python3 benchmarks/gpu_t5_bias_dump.py [--out DIR]
"""

from __future__ import annotations

import argparse
import faulthandler
import pathlib
import re

import torch
import torchkiln
from torchkiln.bench.suites import load_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="/tmp/t5-dump")
    parser.add_argument("--hang-s", type=float, default=100)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    spec = next(s for s in load_suite("hf", "full") if s.name == "t5_encoder")
    model, inputs = spec.build(spec.batch or 16)
    model = model.to("cuda", torch.bfloat16)
    inputs = tuple(x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs)
    compiled = torchkiln.compile(model, options={"debug_dir": args.out})
    with torch.no_grad():
        compiled(*inputs)
    graph = torchkiln.report(compiled).graphs[0]
    wrapper = open(graph.source_path).read().splitlines()
    big = re.compile(r"_empty\(\((\d+), (\d+), 512, 512\)")
    for i, line in enumerate(wrapper):
        if big.search(line):
            print("\n".join(wrapper[max(0, i - 3) : i + 4]))
    for name, path in graph.artifacts.items():
        text = pathlib.Path(path).read_text()
        if ".kernel." in name and "262144" in text:
            body = text[text.index("@triton.jit\ndef tk_") :]
            print(f"--- {name}\n{body[:2500]}")


if __name__ == "__main__":
    main()
