"""Which launch configuration of torchkiln's own kernels reaches the most memory bandwidth, for the
memory-bound cases of gpu_bandwidth.py: a measurement to set codegen-triton's heuristics by
(``autotune.heuristic_config``), not a benchmark of the compiler.

Each case is traced and compiled by loop-ir with the Triton backend, as the pipeline would. Then
each of its kernels is relaunched with a grid of configurations (XBLOCK, RBLOCK, num_warps, and
the chunk count of a split reduction), the other kernels kept at the heuristic's. A row gives
the heuristic's figure, the best one and its configuration, and the five best.

Times are device times of a queue that never runs dry: a ``torch.cuda._sleep`` is enqueued first,
so the host's launch work overlaps it, then ten calls go between two CUDA events.
``gpu_bandwidth.py`` gives this figure first, then the one for one call between two events,
which also counts the host's time to launch it. As a reference, the same for a device-to-device
copy of the case's first input (``torch.Tensor.copy_``).

    python3 benchmarks/gpu_bandwidth_sweep.py [--cases "row sum"] [--dtypes bfloat16]
        [--json out.json] [--sources out.py] [--options '{"persistent_rnumel": 32768}']
"""

from __future__ import annotations

import argparse
import faulthandler
import itertools
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_bandwidth  # noqa: E402

#: the cases the issue's 85% is about (the vocabulary-wide rows are there for comparison)
DEFAULT_CASES = (
    "pointwise chain",
    "gelu + residual",
    "softmax (last dim)",
    "layer norm",
    "add + layer norm",
    "row sum",
    "column sum",
    "softmax (rows of 50257)",
)


def candidates(
    cfg: Any, rnumel: int, caps: tuple[int, ...] = (), narrow: bool = False
) -> list[Any]:
    """Configurations of one kernel's shape (the source fixes persistent vs looped, the layout
    and whether it is split); ``caps``: each of them again at these register caps (maxnreg);
    ``narrow``: only ``cfg``'s tile and twice it, at its warps and twice them, XBLOCK within a
    factor of two."""
    out = [cfg]
    warps = (1, 2, 4, 8, 16, 32)
    if cfg.rblock <= 1 and not cfg.looped:  # pointwise
        for xb, nw in itertools.product((256, 512, 1024, 2048, 4096, 8192), warps):
            if 2 <= xb // (32 * nw) <= 64:
                out.append(replace(cfg, xblock=xb, num_warps=nw))
    elif cfg.transposed:
        for xb, rb, nw in itertools.product((16, 32, 64, 128, 256), (4, 8, 16, 32, 64, 128), warps):
            if not cfg.looped and rb != cfg.rblock:
                continue
            if 512 <= xb * rb <= 16384 and 4 <= xb * rb // (32 * nw) <= 64:
                for split in {cfg.split, cfg.split // 2, cfg.split * 2} if cfg.split else {0}:
                    if split == 0 and cfg.split or split == 1:
                        continue
                    out.append(replace(cfg, xblock=xb, rblock=rb, num_warps=nw, split=split))
    elif not cfg.looped:  # persistent: the whole row in one block
        for xb, nw in itertools.product((1, 2, 4, 8, 16), warps):
            tile = xb * cfg.rblock
            if tile <= 32768 and 2 <= tile // (32 * nw) <= 64:
                out.append(replace(cfg, xblock=xb, num_warps=nw))
    else:
        for xb, rb, nw in itertools.product((1, 2), (1024, 2048, 4096, 8192, 16384), warps):
            tile = xb * rb
            if rb <= 2 * rnumel and tile <= 16384 and 4 <= tile // (32 * nw) <= 64:
                for split in {cfg.split, cfg.split // 2, cfg.split * 2} if cfg.split else {0}:
                    if split == 1 or (split == 0 and cfg.split):
                        continue
                    out.append(replace(cfg, xblock=xb, rblock=rb, num_warps=nw, split=split))
    # a register cap belongs to its warp count (two programs of 32 warps a SM): the others
    # launch without it, and 32 warps with and without it
    out = [c if c.num_warps == cfg.num_warps else replace(c, maxnreg=0) for c in out]
    if cfg.maxnreg:
        out += [replace(c, maxnreg=0) for c in out if c.maxnreg]
    if narrow:
        tile = cfg.xblock * cfg.rblock

        def near(c: Any) -> bool:
            return (
                c.xblock * c.rblock in (tile, 2 * tile)
                and c.num_warps in (cfg.num_warps, 2 * cfg.num_warps)
                and c.xblock in (cfg.xblock // 2, cfg.xblock, 2 * cfg.xblock)
            )

        out = [c for c in out if c == cfg or near(c)]
    out += [replace(c, maxnreg=cap) for cap in caps for c in out if not c.maxnreg]
    return list(dict.fromkeys(out))


def _set(kernel: Any, cfg: Any) -> None:
    """Launch ``kernel`` with ``cfg`` from its next call (its kept binaries were for the old)."""
    kernel.config = cfg
    kernel._ready = None
    kernel._launchers.clear()
    kernel.__dict__.pop("launch_in", None)


def _binaries(kernel: Any) -> dict[int, Any]:
    """The compiled binaries Triton keeps for ``kernel``'s functions, by id (empty where this
    Triton keeps them elsewhere)."""
    out = {}
    for fn in (kernel._fn, kernel._finish):
        for entry in getattr(fn, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            for binary in getattr(cache, "values", dict)():
                out[id(binary)] = binary
    return out


def _registers(binaries: list[Any]) -> str:
    """`` r32`` (registers a thread) for the binaries one configuration compiled, spills too."""
    regs = []
    for b in binaries:
        n, spills = getattr(b, "n_regs", None), getattr(b, "n_spills", 0)
        if n is not None:
            regs.append(f"r{n}" + (f"+{spills}spill" if spills else ""))
    return f" {'/'.join(regs)}" if regs else ""


def _shape(cfg: Any) -> str:
    if cfg.rblock <= 1 and not cfg.looped:
        return "pointwise"
    return "looped" if cfg.looped else "persistent"


def _describe(cfg: Any) -> str:
    split = f" split {cfg.split}" if cfg.split else ""
    cap = f" maxnreg {cfg.maxnreg}" if cfg.maxnreg else ""
    return f"X{cfg.xblock} R{cfg.rblock} w{cfg.num_warps}{split}{cap}"


def sweep_case(
    name: str,
    dtype_name: str,
    fn: Callable[..., Any],
    inputs: tuple[torch.Tensor, ...],
    peak: float,
    options: dict[str, Any] | None = None,
    caps: tuple[int, ...] = (),
    narrow: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """One case: its graph compiled as the pipeline would, then each kernel's configurations
    timed (the others at the heuristic's); the row for the JSON and the kernels' sources."""
    import torchkiln_loop_ir as loop_ir
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchkiln_codegen_triton import TritonBackend, TritonOptions

    def share(ms: float) -> str:
        return f"{moved * 1000 / ms / peak:.0%}"

    reference = fn(*inputs)
    moved = gpu_bandwidth._bytes(inputs) + gpu_bandwidth._bytes(reference)
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    cg = loop_ir.compile_graph(gm, list(inputs), TritonBackend(TritonOptions(**(options or {}))))
    ok = gpu_bandwidth._close(cg(*inputs), reference, gpu_bandwidth.exact_of(fn, inputs))
    first, copy_to = inputs[0], torch.empty_like(inputs[0])
    copy_ms = gpu_bandwidth.queued_ms(lambda: copy_to.copy_(first))
    copy_bytes = 2 * first.numel() * first.element_size()
    base_ms = gpu_bandwidth.queued_ms(lambda: cg(*inputs))
    row: dict[str, Any] = {
        "case": name,
        "dtype": dtype_name,
        "bytes": moved,
        "matches_eager": ok,
        "copy_gb_s": copy_bytes / copy_ms / 1e6,
        "heuristic_ms": base_ms,
        "kernels": [],
    }
    print(
        f"== {name} {dtype_name}: {moved / 2**20:.0f} MB, heuristic {share(base_ms)}, "
        f"copy_ {copy_bytes * 1000 / copy_ms / peak:.0%}, {len(cg.kernels)} kernel(s), "
        f"matches eager: {ok}",
        flush=True,
    )
    sources = []
    for i, kernel in enumerate(cg.kernels):
        sources.append(f"# ==== {name} {dtype_name} kernel {i}: {kernel.config}\n{kernel.source}")
        base = kernel.config
        timed = []
        regs: dict[str, str] = {}
        for cfg in candidates(base, kernel._numels()[1], caps, narrow):
            _set(kernel, cfg)
            before = _binaries(kernel)
            try:
                cg(*inputs)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                ms = gpu_bandwidth.queued_ms(lambda: cg(*inputs), reps=5)
            except Exception as error:  # noqa: BLE001 - registers, shared memory
                print(f"   {_describe(cfg)}: {type(error).__name__}", flush=True)
                continue
            new = [b for k, b in _binaries(kernel).items() if k not in before]
            regs.setdefault(_describe(cfg), _registers(new))
            timed.append((ms, cfg))
        _set(kernel, base)
        timed.sort(key=lambda t: t[0])
        best_ms, best = timed[0]
        own = next(ms for ms, cfg in timed if cfg == base)
        layout = ", transposed" if base.transposed else ""
        print(
            f"  kernel {i} ({_shape(base)}{layout}), heuristic {_describe(base)}"
            f"{regs.get(_describe(base), '')}: "
            f"{own * 1000:.1f} us ({share(own)}); best {_describe(best)}: "
            f"{best_ms * 1000:.1f} us ({share(best_ms)}) of {len(timed)}",
            flush=True,
        )
        top = "; ".join(
            f"{_describe(c)}{regs.get(_describe(c), '')} {share(ms)}" for ms, c in timed[:6]
        )
        print(f"    top: {top}", flush=True)
        row["kernels"].append(
            {
                "heuristic": _describe(base),
                "heuristic_ms": own,
                "timed": [(_describe(c), ms) for ms, c in timed],
                "registers": regs,
            }
        )
    return row, sources


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--peak-tbs", type=float, default=4.3)
    parser.add_argument("--json")
    parser.add_argument("--sources", help="write the cases' kernel sources to this file")
    parser.add_argument("--hang-s", type=float, default=400)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of small cases")
    parser.add_argument(
        "--narrow",
        action="store_true",
        help="only the heuristic's tile and twice it, its warps and twice them",
    )
    parser.add_argument(
        "--maxnreg",
        default="",
        help="register caps to try every configuration at too, e.g. 32,40 (programs a SM)",
    )
    parser.add_argument(
        "--options",
        default="{}",
        help="TritonOptions fields as JSON, e.g. '{\"persistent_rnumel\": 32768}': rows up to "
        "32768 persistent (one read), each kernel's other configurations swept as usual",
    )
    args = parser.parse_args()
    options = json.loads(args.options)
    caps = tuple(int(c) for c in args.maxnreg.split(",") if c.strip())
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    results: list[dict[str, Any]] = []
    sources: list[str] = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for name, fn, inputs in gpu_bandwidth.cases(dtype, args.rows, args.width, args.device):
            if name in wanted:
                with torch.no_grad():
                    row, text = sweep_case(
                        name,
                        dtype_name,
                        fn,
                        inputs,
                        args.peak_tbs * 1e12,
                        options,
                        caps,
                        args.narrow,
                    )
                row["options"] = options
                results.append(row)
                sources += text
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    if args.json:
        Path(args.json).write_text(
            json.dumps({"peak_tb_s": args.peak_tbs, "device": device, "rows": results}, indent=1)
        )
    if args.sources:
        Path(args.sources).write_text("\n".join(sources))


if __name__ == "__main__":
    main()
