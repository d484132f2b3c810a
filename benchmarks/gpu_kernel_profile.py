"""Where the GPU time of a full-size model goes, eager vs torchkiln vs torch.compile: a diagnosis
tool for the GPU session (speed ratios come from `python -m torchkiln bench`; the profiler adds
host overhead, so this reports device-kernel time, which it does not distort).

For each model and task (infer: bfloat16 weights, or --dtype's, no_grad; train: float32 weights, bf16 autocast,
forward + loss + backward, no optimizer step), each variant is warmed up, then:
  - wall ms per iteration (CUDA-synchronised, no profiler), and in 12 rounds after it, each
    with its garbage collections (count, ms) and the allocator's cudaMalloc/cudaFree calls,
  - host ms per iteration: one call from an idle GPU, timed until it returns (no sync),
  - GPU kernel ms per iteration and kernel launches per iteration (torch.profiler, CUDA activity),
  - that kernel time split by kind (gemm, attention, convolution, triton, aten elementwise/reduce,
    copy, other), and the top kernels;
  - torchkiln's kernels against the H200's limits: each generated kernel's achieved bandwidth,
    from the bytes it must move (the debug dump's ``costs_<part>.json``, loop-ir's ``costs.py``)
    over its time, the kernels furthest from 4.3 TB/s first (ms above their floor), and the
    matmuls' and convolutions' TFLOP/s against the dense peak (790 bf16, 67 fp32).
If wall is well above kernel time, the variant is launch/host bound; otherwise the kernel split
says where a compiler loses. torchkiln's artifacts (wrapper, kernels, schedule) are dumped with
TORCHKILN_DEBUG_DIR and packed into one tar.gz per model and task.

    python3 benchmarks/gpu_kernel_profile.py --suite hf --models gpt2,bert --tasks infer,train \
        --out /tmp/out
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import faulthandler
import gc
import io
import json
import os
import pstats
import re
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

KINDS = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("convolution", re.compile(r"implicit_gemm|wgrad|dgrad|fprop|cudnn|conv2d|convolution", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|splitK", re.I)),
    ("copy", re.compile(r"copy|Memcpy|Memset|CatArray", re.I)),
    (
        "triton",
        re.compile(r"^\w+$"),
    ),  # Triton kernels are plain identifiers; ATen's are C++ signatures
    ("reduce", re.compile(r"reduce|softmax|norm|welford", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled", re.I)),
)


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def kernels(prof: Any, iters: int) -> dict[str, list[float]]:
    """kernel name -> [ms per iteration, launches per iteration]"""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(evt, "device_time", None)
        if us is None:
            us = evt.cuda_time
        out[evt.name][0] += us / 1000.0 / iters
        out[evt.name][1] += 1.0 / iters
    return dict(out)


def runtime_calls(prof: Any, iters: int) -> dict[str, list[float]]:
    """CUDA runtime/driver API call name -> [host ms per iteration, calls per iteration]: a
    synchronize, a cudaMalloc/cudaFree or a blocking copy in the steady state stalls the host's
    run-ahead, and the launch calls' own time is the floor of the host cost per kernel."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA or not evt.name.startswith("cu"):
            continue
        out[evt.name][0] += evt.cpu_time_total / 1000.0 / iters
        out[evt.name][1] += 1.0 / iters
    return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))


def measure(fn: Any, iters: int) -> dict[str, Any]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1000 / iters
    rounds = []  # wall ms per iteration in 12 rounds: does the time move within a process?
    # and per round what could move it from the host's side: Python's garbage collections
    # (count, ms) and the caching allocator's cudaMalloc/cudaFree calls and OOM retries
    rounds_gc: list[tuple[int, float]] = []
    rounds_alloc: list[tuple[int, ...]] = []
    gc_seen = {"n": 0, "s": 0.0, "t0": 0.0}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_seen["t0"] = time.perf_counter()
        else:
            gc_seen["n"] += 1
            gc_seen["s"] += time.perf_counter() - gc_seen["t0"]

    def allocator() -> tuple[int, ...]:
        stats = torch.cuda.memory_stats()
        keys = ("num_device_alloc", "num_device_free", "num_alloc_retries")
        return tuple(int(stats.get(k, 0)) for k in keys)

    gc.callbacks.append(on_gc)
    try:
        for _ in range(12):
            n0, s0, a0 = gc_seen["n"], gc_seen["s"], allocator()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            rounds.append(round((time.perf_counter() - t0) * 1000 / iters, 3))
            rounds_gc.append((int(gc_seen["n"] - n0), round((gc_seen["s"] - s0) * 1000, 2)))
            rounds_alloc.append(tuple(b - a for a, b in zip(a0, allocator())))
    finally:
        gc.callbacks.remove(on_gc)
    # The host's own time per iteration: one call from an idle, synchronised GPU, timed until it
    # returns (no synchronisation): the GPU runs what is queued meanwhile, and one step's
    # launches (a few hundred) do not fill CUDA's launch queue, so the call never waits on the
    # GPU. (Queueing several steps behind a sleep kernel, as this did first, fills that queue
    # in a training step: every variant read about 63 ms.) A variant whose host time is close to
    # its kernel time is host bound, and the host's load moves its wall time.
    host = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1000)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    table = kernels(prof, iters)
    split: dict[str, float] = defaultdict(float)
    for name, (ms, _) in table.items():
        split[kind_of(name)] += ms
    top = sorted(table.items(), key=lambda kv: -kv[1][0])[:40]
    return {
        "wall_ms": wall,
        "rounds_ms": rounds,
        "rounds_gc": rounds_gc,  # per round: (collections, ms in them)
        "rounds_alloc": rounds_alloc,  # per round: (cudaMalloc, cudaFree, OOM retries)
        "host_ms": min(host),
        "kernel_ms": sum(ms for ms, _ in table.values()),
        "launches": sum(n for _, n in table.values()),
        "split_ms": dict(sorted(split.items(), key=lambda kv: -kv[1])),
        "top": [[name[:140], round(ms, 4), round(n, 2), kind_of(name)] for name, (ms, n) in top],
        "table": table,  # every kernel: [ms, launches] per iteration (dropped after the join)
        "runtime": {
            k: [round(ms, 3), round(n, 1)] for k, (ms, n) in runtime_calls(prof, iters).items()
        },
    }


#: the H200's limits the issue measures against: copy bandwidth, dense matmul FLOP/s
PEAK_BYTES_S = 4.3e12
PEAK_FLOPS = {"bf16": 790e12, "fp32": 67e12}


def load_costs(debug: Path) -> list[dict[str, Any]]:
    """Every step's floor from the debug dump's ``costs_<part>.json`` files (loop-ir's
    ``costs.py``: a kernel's bytes, an extern matmul's or convolution's FLOPs)."""
    out: list[dict[str, Any]] = []
    for path in sorted(debug.rglob("costs_*.json")):
        out += json.loads(path.read_text())
    return out


def limits(
    table: dict[str, list[float]], costs: list[dict[str, Any]], peak_flops: float
) -> dict[str, Any]:
    """torchkiln's kernels against the device's limits: each generated kernel's achieved
    bandwidth (the bytes it must move, from ``costs``, per its measured ms) and the ms it spends
    above that floor, the furthest first; the matmuls' and convolutions' FLOPs per the gemm and
    convolution kernels' ms. Each graph of the dump is taken to run once an iteration (a
    training step's forward and backward)."""
    per_launch: dict[str, list[int]] = defaultdict(list)
    flops = 0
    for c in costs:
        if c["kind"] == "kernel" and c.get("function") and c.get("bytes") is not None:
            per_launch[c["function"]].append(c["bytes"])
        elif c["kind"] == "extern" and c.get("flops"):
            flops += c["flops"]
    rows, unmatched = [], 0.0
    for name, (ms, n) in table.items():
        if name not in per_launch:
            if kind_of(name) == "triton":
                unmatched += ms
            continue
        sites = per_launch[name]
        moved = sum(sites) / len(sites) * n  # bytes an iteration (sites of one function alike)
        floor = moved / PEAK_BYTES_S * 1e3
        rows.append(
            {
                "kernel": name,
                "ms": round(ms, 4),
                "launches": round(n, 2),
                "gb_s": round(moved / (ms * 1e-3) / 1e9, 1) if ms else None,
                "of_peak": round(moved / (ms * 1e-3) / PEAK_BYTES_S, 3) if ms else None,
                "ms_above_floor": round(ms - floor, 4),
            }
        )
    rows.sort(key=lambda r: -r["ms_above_floor"])
    dense_ms = sum(
        ms for name, (ms, _) in table.items() if kind_of(name) in ("gemm", "convolution")
    )
    generated_ms = sum(r["ms"] for r in rows)
    return {
        "generated_ms": round(generated_ms, 3),
        "generated_floor_ms": round(generated_ms - sum(r["ms_above_floor"] for r in rows), 3),
        "generated_without_costs_ms": round(unmatched, 3),
        "furthest": rows[:15],
        "dense": {
            "ms": round(dense_ms, 3),
            "tflops": round(flops / (dense_ms * 1e-3) / 1e12, 1) if dense_ms else None,
            "of_peak": round(flops / (dense_ms * 1e-3) / peak_flops, 3) if dense_ms else None,
            "gflop_per_iter": round(flops / 1e9, 1),
        },
    }


def build(suite: str, name: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from torchkiln.bench.suites import load_suite

    for spec in load_suite(suite, "full"):
        if spec.name == name:
            return spec.build(spec.batch)
    raise SystemExit(f"no model {name!r} in the full {suite} suite")


def variants(
    suite: str,
    name: str,
    task: str,
    debug: Path,
    host_profile: Path | None = None,
    only: tuple[str, ...] = (),
    options: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> dict[str, Any]:
    import torchkiln
    from torchkiln.bench.train import _no_dropout, loss_of

    model, inputs = build(suite, name)
    if task == "infer":
        model = model.to("cuda", dtype).eval()
        inputs = tuple(
            t.to("cuda", dtype) if t.is_floating_point() else t.to("cuda") for t in inputs
        )
        models = {"eager": model, "torchkiln": model, "inductor": model}
        ctx: Any = torch.no_grad
    else:
        model = _no_dropout(model).train().to("cuda")
        inputs = tuple(t.to("cuda") for t in inputs)
        models = {
            "eager": model,
            "torchkiln": copy.deepcopy(model),
            "inductor": copy.deepcopy(model),
        }
        ctx = contextlib.nullcontext
    os.environ["TORCHKILN_DEBUG_DIR"] = str(debug)
    fns = {
        "eager": models["eager"],
        "torchkiln": torchkiln.compile(models["torchkiln"], options=options),
        "inductor": torch.compile(models["inductor"]),
    }
    if only:
        fns = {k: v for k, v in fns.items() if k in only}

    def call(label: str) -> Any:
        fn, m = fns[label], models[label]

        def run() -> None:
            if task == "infer":
                with torch.no_grad():
                    fn(*inputs)
            else:
                m.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_of(fn(*inputs))
                loss.backward()

        return run

    del ctx
    result: dict[str, Any] = {}
    for label in fns:
        run = call(label)
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        result[label] = {"first_call_s": first}
    os.environ.pop("TORCHKILN_DEBUG_DIR", None)
    for label in fns:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        result[label].update(measure(call(label), iters=10 if task == "infer" else 5))
        result[label]["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        table = result[label].pop("table")
        if label == "torchkiln":
            peak = PEAK_FLOPS["fp32" if task == "infer" and dtype == torch.float32 else "bf16"]
            result[label]["limits"] = limits(table, load_costs(debug), peak)
    if host_profile is not None:
        # Where torchkiln's host time goes (Python wrapper, guards, autograd glue): a step that is
        # slower in wall time than in kernel time is launch/host bound, and this says on what.
        profiler = cProfile.Profile()
        run = call("torchkiln")
        torch.cuda.synchronize()
        profiler.enable()
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(45)
        stats.sort_stats("cumulative").print_stats(45)
        # the host time of each ATen op the compiled code calls (externs: matmuls, attention,
        # convolutions, allocations), from the profiler's CPU events
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                run()
            torch.cuda.synchronize()
        ops: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for evt in prof.events():
            if evt.device_type == torch.autograd.DeviceType.CUDA:
                continue
            ops[evt.name][0] += evt.self_cpu_time_total / 5000.0
            ops[evt.name][1] += evt.cpu_time_total / 5000.0
            ops[evt.name][2] += 1 / 5
        text.write("\n\nhost ms per step by op (self, total, calls):\n")
        for op, (own, total, n) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:45]:
            text.write(f"{own:9.3f} {total:9.3f} {n:7.1f}  {op[:120]}\n")
        # one file for every model and task: the device tool brings back 8 files at most
        with host_profile.open("a") as f:
            f.write(f"===== {name} {task}\n{text.getvalue()}\n")
    return result


def report(model: str, task: str, result: dict[str, Any]) -> str:
    lines = [f"===== {model} {task}"]
    for label, r in result.items():
        split = ", ".join(f"{k} {v:.2f}" for k, v in r["split_ms"].items())
        lines.append(
            f"{label:10s} wall {r['wall_ms']:8.2f} ms  host {r['host_ms']:8.2f} ms  "
            f"kernels {r['kernel_ms']:8.2f} ms "
            f"({r['launches']:.0f} launches)  first call {r['first_call_s']:.1f} s  "
            f"peak {r['peak_mb']:.0f} MB"
        )
        lines.append(f"           split: {split}")
        lines.append(f"           rounds: {' '.join(f'{ms:.2f}' for ms in r['rounds_ms'])}")
        gcs = " ".join(f"{n}/{ms:.1f}" for n, ms in r.get("rounds_gc", []))
        allocs = " ".join("/".join(map(str, a)) for a in r.get("rounds_alloc", []))
        lines.append(f"           gc per round (collections/ms): {gcs}")
        lines.append(f"           cudaMalloc/cudaFree/retries per round: {allocs}")
        calls = ", ".join(
            f"{k} {ms:.2f} ms/{n:.0f}" for k, (ms, n) in list(r["runtime"].items())[:8]
        )
        lines.append(f"           runtime API: {calls}")
    for label, r in result.items():
        lines.append(f"--- top kernels, {label} (ms/iter, launches/iter, kind)")
        for name, ms, n, kind in r["top"][:18]:
            lines.append(f"  {ms:8.3f} {n:6.1f} {kind:12s} {name}")
    lim = result.get("torchkiln", {}).get("limits")
    if lim:
        dense = lim["dense"]
        lines.append(
            f"--- torchkiln against the H200's limits: generated kernels {lim['generated_ms']:.3f}"
            f" ms/iter, {lim['generated_floor_ms']:.3f} at 4.3 TB/s"
            f" ({lim['generated_without_costs_ms']:.3f} ms without a cost record); matmuls and"
            f" convolutions {dense['gflop_per_iter']} GFLOP in {dense['ms']:.3f} ms:"
            f" {dense['tflops']} TFLOP/s ({dense['of_peak']} of the peak)"
        )
        lines.append(
            "  furthest from the bandwidth (ms/iter, launches, GB/s, of 4.3 TB/s, ms above)"
        )
        for row in lim["furthest"]:
            lines.append(
                f"  {row['ms']:8.3f} {row['launches']:6.1f} {row['gb_s']!s:>8} "
                f"{row['of_peak']!s:>6} {row['ms_above_floor']:8.3f}  {row['kernel']}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="hf")
    parser.add_argument("--models", default="gpt2")
    parser.add_argument("--tasks", default="infer,train")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--hang-s", type=float, default=540)
    parser.add_argument("--only", default="", help="a subset of eager,torchkiln,inductor")
    parser.add_argument(
        "--options",
        default="",
        help='torchkiln.compile options as JSON, e.g. \'{"loop_ir": {"split_programs": 0}}\'',
    )
    parser.add_argument(
        "--dtype",
        default="bfloat16",
        choices=("bfloat16", "float16", "float32"),
        help="the weights' and inputs' dtype for infer (train: float32 weights, bf16 autocast)",
    )
    parser.add_argument(
        "--host-profile",
        action="store_true",
        help="also cProfile 5 torchkiln steps of each model and task into host-<suite>.txt",
    )
    parser.add_argument(
        "--no-tar",
        action="store_true",
        help="do not pack torchkiln's debug dump of each model and task (the device tool brings "
        "back 8 files a call)",
    )
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    all_results = {}
    json_path = out / f"profile-{args.suite}.json"
    (out / f"host-{args.suite}.txt").unlink(missing_ok=True)  # appended to per model and task
    for name in args.models.split(","):
        for task in args.tasks.split(","):
            debug = Path(tempfile.mkdtemp(prefix=f"tk-{name}-{task}-"))
            try:
                host = out / f"host-{args.suite}.txt" if args.host_profile else None
                result = variants(
                    args.suite,
                    name,
                    task,
                    debug,
                    host,
                    tuple(args.only.split(",")) if args.only else (),
                    json.loads(args.options) if args.options else None,
                    getattr(torch, args.dtype),
                )
            except Exception as error:  # noqa: BLE001 - one model must not stop the session
                print(f"===== {name} {task}: {type(error).__name__}: {str(error)[:300]}")
                continue
            finally:
                torch.cuda.empty_cache()
            all_results[f"{name}/{task}"] = result
            print(report(name, task, result), flush=True)
            json_path.write_text(json.dumps(all_results, indent=1))
            if args.no_tar:
                continue
            tar = out / f"debug-{name}-{task}.tar.gz"
            with tarfile.open(tar, "w:gz") as t:
                t.add(debug, arcname=f"{name}-{task}")
            if tar.stat().st_size > 15 * 2**20:
                tar.unlink()
                print(f"(debug dump of {name} {task} too large to bring back)")
    print(f"wrote {json_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
