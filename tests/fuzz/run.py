"""Run many fuzzed programs and print wrong/fallback/crash counts with the seeds that failed.

    python tests/fuzz/run.py --programs 2000 --seed 0
    python tests/fuzz/run.py --programs 10000 --seed 70000 --jobs 16 --json benchmarks/results/fuzz.json
    python -m tests.fuzz --programs 200 --seed 1000 --verbose
    python tests/fuzz/run.py --programs 500 --seed 0 --train-share 0.5 --break-share 0.3

Program ``k`` of a run is ``generate(seed + k)``: a failing seed is reproduced alone with
``--programs 1 --seed <that seed> --verbose``, which prints its source. Programs run in child
processes (``--chunk`` programs each, ``--jobs`` children at once over disjoint chunks of seeds),
so a program that kills its process (a segfault in a kernel) is counted as a crash and the run
goes on with the next seed. ``--json PATH`` writes the summary (counts, seeds of each kind,
fallback reasons, versions, the command) for benchmarks/results/. An *op-fallback* (an ATen op
run as a fallback kernel inside a compiled graph) lists its seed and, among the reasons, the op.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.fuzz` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tests.fuzz"

os.environ.setdefault("TRITON_INTERPRET", "1")

from tests.fuzz.generator import GENERATOR_VERSION, generate  # noqa: E402
from tests.fuzz.oracle import judge  # noqa: E402

KINDS = (
    "ok",
    "wrong",
    "no-error",
    "crash",
    "unstable",
    "undefined",
    "fallback",
    "error-replay",
    "op-fallback",
    "harness",
)
SEED_KINDS = (
    "wrong",
    "no-error",
    "crash",
    "fallback",
    "error-replay",
    "op-fallback",
    "unstable",
    "undefined",
    "harness",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--programs", type=int, default=200)
    p.add_argument("--seed", type=int, default=0, help="first seed; program k has seed SEED+k")
    p.add_argument(
        "--triton-share",
        type=float,
        default=0.1,
        help="share of programs compiled with codegen=triton (Triton's interpreter)",
    )
    p.add_argument("--dynamic-share", type=float, default=0.3)
    p.add_argument(
        "--train-share",
        type=float,
        default=0.0,
        help="share of training programs (gradients compared too)",
    )
    p.add_argument(
        "--break-share", type=float, default=0.0, help="share of programs with graph breaks"
    )
    p.add_argument(
        "--nn-share",
        type=float,
        default=0.0,
        help="share of programs that may draw convolutions and batch norms too",
    )
    p.add_argument(
        "--pool-share",
        type=float,
        default=0.0,
        help="share of programs that may draw pooling too (half with max pooling's generated "
        "backward)",
    )
    p.add_argument(
        "--layout-share",
        type=float,
        default=0.0,
        help='share of programs compiled with channels_last="always" (the layout pass CUDA runs)',
    )
    p.add_argument(
        "--loop-ir",
        default="",
        metavar="JSON",
        help="LoopIROptions for every program, over its own (e.g. '{\"max_fusions\": 0}': "
        "each node its own kernel, which Triton programs then launch as combo kernels)",
    )
    p.add_argument("--verbose", action="store_true", help="print each failing program's source")
    p.add_argument("--chunk", type=int, default=50, help="programs per child process")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="child processes running at once, each on its own chunks of seeds",
    )
    p.add_argument(
        "--json", metavar="PATH", help="also write the summary as JSON (benchmarks/results/)"
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args)
    import warnings

    warnings.filterwarnings("ignore")
    counts: collections.Counter[str] = collections.Counter()
    seeds: dict[str, list[int]] = collections.defaultdict(list)
    reasons: collections.Counter[str] = collections.Counter()
    start = time.time()
    done = 0
    interrupted = False
    signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` of a background run: summary, then exit
    outcomes = _outcomes(args, threading.Event())
    try:
        for seed, out in outcomes:
            _count(args, seed, out, counts, seeds, reasons)
            done += 1
            if done % 25 == 0:
                print(
                    f"... {done} programs, {time.time() - start:.0f}s: {dict(counts)}", flush=True
                )
    except KeyboardInterrupt:  # a long run stopped early still reports what it saw
        interrupted = True
        print(f"interrupted after {done} programs", flush=True)
    finally:
        outcomes.close()  # stops the workers and kills their children
    n, seconds = done, time.time() - start
    for kind in seeds:
        seeds[kind].sort()  # parallel chunks finish in any order
    print(
        f"\n{n} programs, seeds {args.seed}..{args.seed + args.programs - 1}"
        f"{' (interrupted)' if interrupted else ''}, {seconds:.0f}s, {args.jobs} job(s)"
    )
    for kind in KINDS:
        print(f"  {kind:12s} {counts[kind]:6d}  ({100 * counts[kind] / max(n, 1):.2f}%)")
    for kind in SEED_KINDS:
        if seeds[kind]:
            print(f"  {kind} seeds: {' '.join(map(str, seeds[kind]))}")
    if reasons:
        print("  fallback reasons:")
        for r, c in reasons.most_common(15):
            print(f"    {c:5d}  {r}")
    if args.json:
        _write_json(args, argv, n, seconds, interrupted, counts, seeds, reasons)
    return 1 if counts["wrong"] or counts["crash"] or counts["no-error"] else 0


def _outcomes(args, stop: threading.Event):
    """(seed, outcome dict) of every program of the run, as they come: chunks of ``--chunk``
    seeds, each in a child process, ``--jobs`` of them at once. Closing the generator (the run
    was interrupted) sets ``stop``: no new child starts and the running ones are killed."""
    chunks = collections.deque(
        (args.seed + k, min(args.chunk, args.programs - k))
        for k in range(0, args.programs, args.chunk)
    )
    if args.jobs <= 1:
        for first, n in chunks:
            yield from _in_child(args, first, n, stop)
        return
    results: queue.Queue = queue.Queue()
    lock = threading.Lock()

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    if not chunks:
                        break
                    first, n = chunks.popleft()
                for item in _in_child(args, first, n, stop):
                    results.put(item)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which raises it
            results.put(e)
        results.put(None)  # this worker is done

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(args.jobs)]
    for w in workers:
        w.start()
    finished = 0
    try:
        while finished < len(workers):
            try:
                item = results.get(timeout=1)
            except queue.Empty:
                continue
            if item is None:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        for proc in list(_RUNNING):
            proc.kill()


def _write_json(args, argv, n, seconds, interrupted, counts, seeds, reasons) -> None:
    import platform

    import torch

    summary = {
        "command": "python tests/fuzz/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "programs": n,
        "seeds": [args.seed, args.seed + args.programs - 1],
        "interrupted": interrupted,
        "seconds": round(seconds, 1),
        "jobs": args.jobs,
        "triton_share": args.triton_share,
        "dynamic_share": args.dynamic_share,
        "train_share": args.train_share,
        "break_share": args.break_share,
        "nn_share": args.nn_share,
        "pool_share": args.pool_share,
        "layout_share": args.layout_share,
        "loop_ir": args.loop_ir,
        "counts": {kind: counts[kind] for kind in KINDS},
        "seeds_by_kind": {kind: seeds[kind] for kind in SEED_KINDS},
        "fallback_reasons": dict(reasons.most_common()),
        "generator_version": GENERATOR_VERSION,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"  summary written to {args.json}")


def _shares(args) -> dict[str, float]:
    """``generate``'s keyword arguments from the command line's shares."""
    return {
        "triton_share": args.triton_share,
        "dynamic_share": args.dynamic_share,
        "train_share": args.train_share,
        "break_share": args.break_share,
        "nn_share": args.nn_share,
        "pool_share": args.pool_share,
        "layout_share": args.layout_share,
    }


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _child(args) -> int:
    """Judge programs ``seed .. seed+programs-1``, one JSON line each (after a START line, so
    the parent knows which program a dead child was running)."""
    import warnings

    warnings.filterwarnings("ignore")
    for seed in range(args.seed, args.seed + args.programs):
        print(f"START {seed}", flush=True)
        program = generate(seed, **_shares(args))
        try:
            if args.loop_ir:
                program.loop_ir = {**program.loop_ir, **json.loads(args.loop_ir)}
            out = dataclasses.asdict(judge(program))
        except Exception as e:  # noqa: BLE001 - a bug of the harness itself: count, go on
            out = {"kind": "harness", "detail": f"{type(e).__name__}: {e}"}
        out["source"] = program.describe()
        print("RESULT " + json.dumps(out), flush=True)
    return 0


_RUNNING: set[subprocess.Popen] = set()  # child processes alive, killed when the run is interrupted


def _in_child(args, first: int, n: int, stop: threading.Event):
    """Yield (seed, outcome dict) for ``n`` programs from ``first``, each in a child process; a
    child that dies is reported as a crash of the program it was running, and the next child
    starts after it (unless the run is stopping: then it was killed)."""
    seed = first
    while seed < first + n and not stop.is_set():
        cmd = [
            sys.executable,
            "-m",
            "tests.fuzz.run",
            "--child",
            "--seed",
            str(seed),
            "--programs",
            str(first + n - seed),
            "--triton-share",
            str(args.triton_share),
            "--dynamic-share",
            str(args.dynamic_share),
            "--train-share",
            str(args.train_share),
            "--break-share",
            str(args.break_share),
            "--nn-share",
            str(args.nn_share),
            "--pool-share",
            str(args.pool_share),
            "--layout-share",
            str(args.layout_share),
            *(["--loop-ir", args.loop_ir] if args.loop_ir else []),
        ]
        root = Path(__file__).resolve().parents[2]
        proc = subprocess.Popen(
            cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        _RUNNING.add(proc)
        if stop.is_set():  # stopped while it started: the main thread may have missed it
            proc.kill()
        running = None
        try:
            for line in proc.stdout:
                if line.startswith("START "):
                    running = int(line.split()[1])
                elif line.startswith("RESULT "):
                    yield running, json.loads(line[7:])
                    seed, running = running + 1, None
        except BaseException:  # interrupted (or the consumer stopped): take the child down too
            proc.kill()
            raise
        rc = proc.wait()
        _RUNNING.discard(proc)
        if stop.is_set():
            return
        if running is not None:
            yield (
                running,
                {
                    "kind": "crash",
                    "detail": f"the process died (exit code {rc}) running it",
                    "source": generate(running, **_shares(args)).describe(),
                },
            )
            seed = running + 1
        elif seed < first + n:  # died before starting a program: do not loop forever
            raise RuntimeError(f"fuzz child exited with {rc} before running seed {seed}")


def _count(args, seed: int, out: dict, counts, seeds, reasons) -> None:
    """Count one program's outcome and print it when it failed."""
    kind = out["kind"]
    counts[kind] += 1
    if kind == "harness":
        seeds["harness"].append(seed)
        print(f"seed {seed}: harness error {out['detail']}", flush=True)
        return
    if out.get("fallback"):
        counts["fallback"] += 1
        seeds["fallback"].append(seed)
        for r in out["fallback_reasons"]:
            reasons[_short(r)] += 1
    if out.get("op_fallbacks"):
        counts["op-fallback"] += 1
        seeds["op-fallback"].append(seed)
        for op in set(out["op_fallbacks"]):
            reasons[f"ATen op run as a fallback kernel: {op}"] += 1
    if out.get("error_replay"):
        counts["error-replay"] += 1
        seeds["error-replay"].append(seed)
    if kind != "ok":
        seeds[kind].append(seed)
    if kind in ("wrong", "crash", "no-error") or (
        args.verbose and (out.get("fallback") or kind != "ok")
    ):
        print(
            f"seed {seed}: {kind}{' (fallback)' if out.get('fallback') else ''}: {out['detail']}",
            flush=True,
        )
        for r in out.get("fallback_reasons", []):
            print(f"    fallback: {r}")
        if args.verbose:
            print(out["source"])


def _short(reason: str) -> str:
    import re

    reason = re.sub(r"graph \d+ \(\d+ FX nodes\)", "graph N", reason)
    reason = re.sub(r"'s\d+'", "'sN'", reason)
    return reason[:160]


if __name__ == "__main__":
    sys.exit(main())
