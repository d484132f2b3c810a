"""Which reduction kernels of a dumped schedule get codegen-triton's transposed block layout and
a split reduction, and how many addresses keep a division per element. No GPU needed.

    python benchmarks/reduction_layouts.py <debug dir>/<graph> [forward|backward]

Reads ``schedule_<part>.txt`` (the kernels: ranges, loads, stores, reductions) and
``loop_ir_<part>.txt`` (buffer dtypes) of a ``TORCHKILN_DEBUG`` dump, rebuilds each reduction
kernel's memory accesses as a ``KernelSpec`` and asks the code generator's own decisions
(``choose_layout``, ``heuristic_config``). Prints one line per group of identical kernels:
the layout, the split, blocks and programs before and after (the old heuristic: default layout,
no split), and the bytes one kernel moves with its time at 3 TB/s.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import sympy
import torch
from torchkiln_codegen_triton import TritonOptions
from torchkiln_codegen_triton._flat_index import FlatIndex
from torchkiln_codegen_triton._layout import BlockLayout, choose_layout
from torchkiln_codegen_triton.autotune import heuristic_config
from torchkiln_loop_ir._simplify import simplify_index
from torchkiln_loop_ir.backend import BufferSpec, KernelNode, KernelSpec, KernelStage
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing, index_symbol
from torchkiln_loop_ir.ops import ops

_SYMS = {f"{p}{i}": index_symbol(p, i) for p in "xr" for i in range(8)}
_LOCALS = {"FloorDiv": FloorDiv, "ModularIndexing": ModularIndexing, **_SYMS}
_HEAD = re.compile(
    r"  (kernel\d+): xranges=\[([^\]]*)\] rranges=\[([^\]]*)\] inputs=\[([^\]]*)\] "
    r"outputs=\[([^\]]*)\] local=\[([^\]]*)\]"
)


def _names(text: str) -> list[str]:
    return [t.strip().strip("'") for t in text.split(",") if t.strip()]


def read_kernels(path: Path) -> list[dict]:
    kernels: list[dict] = []
    for line in path.read_text().splitlines():
        if m := _HEAD.match(line):
            kernels.append(
                dict(
                    name=m[1],
                    x=[int(v) for v in _names(m[2])],
                    r=[int(v) for v in _names(m[3])],
                    inputs=_names(m[4]),
                    outputs=_names(m[5]),
                    local=_names(m[6]),
                    stages=[],
                )
            )
        elif kernels and (m := re.match(r"    stage (\w+):", line)):
            kernels[-1]["stages"].append((m[1], []))
        elif kernels and kernels[-1]["stages"]:
            s, ops_ = line.strip(), kernels[-1]["stages"][-1][1]
            if m := re.match(r"tmp\d+ = ops\.load\('(\w+)', (.*)\)$", s):
                ops_.append(("load", m[1], m[2]))
            elif m := re.match(
                r"ops\.store(?:_reduction)?\('(\w+)', (.*?), tmp\d+(?:, \w+)?\)$", s
            ):
                ops_.append(("store", m[1], m[2]))
            elif m := re.match(r"tmp\d+ = ops\.reduction\([^']*'(\w+)'", s):
                ops_.append(("reduction", m[1], ""))
    return kernels


def _spec(k: dict, dtypes: dict[str, torch.dtype]) -> KernelSpec:
    ranges = _ranges(k)

    def body_of(stmts):
        def body(x, r):
            for kind, a, b in stmts:
                if kind == "reduction":
                    ops.reduction(torch.float32, torch.float32, a, None)
                else:
                    idx = simplify_index(sympy.sympify(b, locals=_LOCALS), ranges)
                    ops.load(a, idx) if kind == "load" else ops.store(a, idx, None)

        return body

    names = set(k["inputs"]) | set(k["outputs"]) | set(k["local"])
    bufs = {
        n: BufferSpec(n, dtypes.get(n, torch.float32), torch.device("cuda"), (), ()) for n in names
    }
    stages = tuple(KernelStage(kind, (KernelNode("n", body_of(st)),)) for kind, st in k["stages"])
    return KernelSpec(
        k["name"],
        tuple(map(sympy.Integer, k["x"])),
        tuple(map(sympy.Integer, k["r"])),
        stages,
        bufs,
        tuple(k["inputs"]),
        tuple(k["outputs"]),
        frozenset(k["local"]),
    )


def _ranges(k: dict) -> dict:
    return {
        **{index_symbol("x", i): v for i, v in enumerate(k["x"])},
        **{index_symbol("r", i): v for i, v in enumerate(k["r"])},
    }


def _bytes(k: dict, dtypes: dict[str, torch.dtype]) -> int:
    """Each distinct memory access once, times the points of the ranges it varies along."""
    xn, rn = sympy.prod(k["x"]), sympy.prod(k["r"])
    seen, total = set(), 0
    for _, st in k["stages"]:
        for kind, a, b in st:
            if kind == "reduction" or a in k["local"] or (a, b) in seen:
                continue
            seen.add((a, b))
            names = {s.name[0] for s in sympy.sympify(b, locals=_LOCALS).free_symbols}
            total += (
                (xn if "x" in names else 1)
                * (rn if "r" in names else 1)
                * dtypes.get(a, torch.float32).itemsize
            )
    return int(total)


def main(folder: Path, part: str) -> None:
    dtypes = {}
    for line in (folder / f"loop_ir_{part}.txt").read_text().splitlines():
        if m := re.match(r"\s+(\w+): \w+ FixedLayout\(\w+, (\w+), size=", line):
            dtypes[m[1]] = getattr(torch, m[2])
    kernels = read_kernels(folder / f"schedule_{part}.txt")
    options, groups = TritonOptions(), collections.defaultdict(list)
    for k in kernels:
        if not k["r"]:
            continue
        spec = _spec(k, dtypes)
        layout = choose_layout(spec)
        new = heuristic_config(spec, options, layout)
        old = heuristic_config(spec, TritonOptions(split_max_chunks=0), BlockLayout())
        reds = sorted({a for _, st in k["stages"] for kind, a, _ in st if kind == "reduction"})
        key = (str(k["x"]), str(k["r"]), str([s[0] for s in k["stages"]]), str(reds), new, old)
        groups[key].append((k["name"], _bytes(k, dtypes), layout.reason))
    for (x, r, stages, reds, new, old), ks in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        xn = int(sympy.prod(eval(x)))  # noqa: S307 - our own list text
        mb = sum(b for _, b, _ in ks) / len(ks) / 1e6

        def shape(c):
            return f"{'[R,X]' if c.transposed else '[X,R]'} {c.xblock}x{c.rblock}{'L' if c.looped else 'P'}"

        print(
            f"{len(ks):3d} x {ks[0][0]:10s} x={x} r={r} stages={stages} {reds}: {shape(old)} "
            f"{-(-xn // old.xblock)} programs -> {shape(new)} split={new.split} "
            f"{-(-xn // new.xblock) * (new.split or 1)} programs; {mb:.1f} MB = {mb / 3e3:.3f} ms at 3 TB/s"
        )
    n = sum(len(v) for v in groups.values())
    print(
        f"{n} reduction kernels: {sum(len(v) for k, v in groups.items() if k[4].transposed)} transposed, "
        f"{sum(len(v) for k, v in groups.items() if k[4].split)} split"
    )
    before = after = 0
    for k in kernels:
        ranges, flat = (
            _ranges(k),
            FlatIndex([sympy.Integer(v) for v in k["x"]], [sympy.Integer(v) for v in k["r"]]),
        )
        split = lambda e: bool(e.atoms(FloorDiv, ModularIndexing))  # noqa: E731
        multi = sum(v != 1 for v in k["x"]) > 1 or sum(v != 1 for v in k["r"]) > 1
        for _, st in k["stages"]:
            for kind, a, b in st:
                if kind == "reduction" or a in k["local"]:
                    continue
                e = sympy.sympify(b, locals=_LOCALS)
                uses = bool(e.free_symbols & ranges.keys())
                before += split(e) or (multi and uses)
                f = flat.rewrite(simplify_index(e, ranges))
                after += split(f) or (multi and bool(f.free_symbols & ranges.keys()))
    print(
        f"addresses needing a // or % per element (their own, or recovering a variable of a "
        f"multi-range kernel): {before} as dumped, {after} now"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "backward")
