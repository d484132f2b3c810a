"""Step graphs against no step graphs: fuzzed programs (training ones, and inference ones that
write an input) compiled twice, by default and with ``mode="reduce-overhead"`` (torchkiln's
``cudagraph_steps``, on the CPU through its ``RecomputingRecorder``), called ``CALLS`` times
each on fresh inputs. The first calls run
before the recording, the later ones replay it; both compilations run the same kernels, so
every result, every input after the call (mutations) and every gradient must be equal, bit for
bit (NaNs where NaNs are), and an error must be the same type. What this checks is the
bookkeeping around a recording (copied and borrowed inputs, cloned and handed-out outputs,
activations still held, mutated inputs, graph breaks), on programs no one wrote by hand.

    PYTHONPATH=. python tests/fuzz/steps.py --programs 500 --seed 970000 --jobs 2 [--json F]

Programs with random ops are skipped (a recording draws random numbers of its own, so the two
compilations' streams part).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch
from torchkiln.cudagraph_steps import OBSERVED_CALLS

from tests.fuzz.generator import generate
from tests.fuzz.oracle import _flat, _gradients, _inputs, _run, _with_grad

#: calls of each program: two observed, then the recording and its replays
CALLS = 5
#: the generator's shares for the command line's defaults (but ``train_share``: its default)
DEFAULT_SHARES = {
    "train_share": 0.7,
    "dynamic_share": 0.0,  # symbolic shapes are never recorded
    "triton_share": 0.3,
    "nn_share": 0.4,
    "break_share": 0.3,
    "pool_share": 0.2,
    "layout_share": 0.2,
}
_RANDOM = ("rand", "dropout", "bernoulli", "multinomial", "normal_", "uniform_", "exponential")


def _differs(a: Any, b: Any) -> str | None:
    """Why ``b`` is not ``a`` bit for bit, or None."""
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return f"{type(a).__name__} against {type(b).__name__}"
    if not isinstance(a, torch.Tensor):
        return None if a == b or (a != a and b != b) else f"{a!r} against {b!r}"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
    if a.requires_grad != b.requires_grad:
        return f"requires_grad {a.requires_grad} against {b.requires_grad}"
    try:
        torch.testing.assert_close(b.detach(), a.detach(), rtol=0, atol=0, equal_nan=True)
    except AssertionError as error:
        return " ".join(str(error).split())[:200]
    return None


def check(seed: int, shares: dict) -> dict:
    """One program's verdict: ``kind`` ("ok", "mismatch", "skipped"), ``detail``, ``replays``."""
    import torchkiln
    from torchkiln import cudagraph_steps

    program = generate(seed, **shares)
    if not program.train and not program.mutated_inputs:
        # an inference graph writing no input is recorded whole (cudagraphs.py), on CUDA alone
        return {"kind": "skipped", "detail": "inference writing no input"}
    if any(word in program.source for word in _RANDOM):
        return {"kind": "skipped", "detail": "random"}
    recorder = cudagraph_steps.RecomputingRecorder()
    cudagraph_steps.RECORDER = recorder
    opts: dict = {"codegen": program.codegen}
    if program.codegen == "triton":
        opts["loop_ir"] = {"combo_kernels": "always"}
    if program.loop_ir:
        opts["loop_ir"] = {**opts.get("loop_ir", {}), **program.loop_ir}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        plain = torchkiln.compile(program.function(), dynamic=program.dynamic or None, options=opts)
        steps = torchkiln.compile(
            program.function(),
            dynamic=program.dynamic or None,
            mode="reduce-overhead",
            options=opts,
        )
        for call in range(CALLS):
            inputs = seed * 10 + call
            a, b = (_one(fn, program, inputs) for fn in (plain, steps))
            why = _disagree(a, b)
            if why is not None and call >= OBSERVED_CALLS and not why.startswith("error"):
                # a replay reads its own copies of the inputs, which may be aligned where the
                # caller's are not, and a kernel may pick another vector width for them: the
                # default mode on such copies is what the replay must equal
                why = _disagree(_one(plain, program, inputs, fresh=True), b)
            if why is not None:
                return _mismatch(program, recorder, f"call {call}: {why}")
    return {"kind": "ok", "detail": "", "replays": recorder.replays}


def _one(fn, program, inputs: int, fresh: bool = False) -> tuple:
    """One call of ``fn`` on the program's inputs of seed ``inputs`` and the gradients after it:
    (result, error, arguments, gradients, backward error). ``fresh``: each tensor argument copied
    into new memory of its sizes and strides first (as a step graph's static copy)."""
    args, leaves = _with_grad(program, _inputs(program, inputs))
    if fresh:
        args = [
            torch.empty_strided(a.size(), a.stride(), dtype=a.dtype).copy_(a)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        ]
    result, error = _run(fn, args)
    grads, grad_error = (None, None) if error else _gradients(result, leaves, inputs)
    return result, error, args, grads, grad_error


def _disagree(a: tuple, b: tuple) -> str | None:
    """Why two ``_one`` runs differ, or None."""
    (res_a, err_a, in_a, g_a, gerr_a), (res_b, err_b, in_b, g_b, gerr_b) = a, b
    for what, x, y in (("error", err_a, err_b), ("backward error", gerr_a, gerr_b)):
        if type(x) is not type(y):
            return f"{what} {type(x).__name__} against {type(y).__name__}"
    if len(_flat(res_a)) != len(_flat(res_b)) or (g_a is None) != (g_b is None):
        return "results of other structure"
    pairs = [(f"result {i}", x, y) for i, (x, y) in enumerate(zip(_flat(res_a), _flat(res_b)))]
    pairs += [(f"input x{i} after the call", x, y) for i, (x, y) in enumerate(zip(in_a, in_b))]
    pairs += [
        (f"gradient {i}", x, y)
        for i, (x, y) in enumerate(zip(g_a or [], g_b or []))
        if x is not None or y is not None
    ]
    for what, x, y in pairs:
        if (x is None) != (y is None):
            return f"{what} is None in one"
        if x is not None and (why := _differs(x, y)) is not None:
            return f"{what}: {why}"
    return None


def _mismatch(program, recorder, detail: str) -> dict:
    return {
        "kind": "mismatch",
        "detail": detail,
        "replays": recorder.replays,
        "source": program.describe(),
    }


def _chunk(first: int, n: int, shares: dict) -> list[tuple[int, dict]]:
    out = []
    for seed in range(first, first + n):
        try:
            out.append((seed, check(seed, shares)))
        except Exception as error:  # noqa: BLE001 - a harness failure is reported, not raised
            out.append((seed, {"kind": "harness", "detail": f"{type(error).__name__}: {error}"}))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", type=int, default=100)
    p.add_argument("--seed", type=int, default=970000)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--chunk", type=int, default=25)
    for name in ("train", "triton", "nn", "break", "pool", "layout"):
        p.add_argument(f"--{name}-share", type=float, default=DEFAULT_SHARES[f"{name}_share"])
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    shares = {
        **DEFAULT_SHARES,
        **{k: getattr(args, k) for k in DEFAULT_SHARES if k != "dynamic_share"},
    }
    start = time.time()
    counts: collections.Counter[str] = collections.Counter()
    seeds: dict[str, list[int]] = collections.defaultdict(list)
    replayed = 0
    chunks = [
        (s, min(args.chunk, args.seed + args.programs - s))
        for s in range(args.seed, args.seed + args.programs, args.chunk)
    ]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for results in pool.map(_chunk, *zip(*chunks), [shares] * len(chunks)):
            for seed, out in results:
                counts[out["kind"]] += 1
                replayed += out.get("replays", 0) > 0
                if out["kind"] not in ("ok", "skipped"):
                    seeds[out["kind"]].append(seed)
                    print(f"seed {seed}: {out['kind']}: {out['detail']}", flush=True)
                    if "source" in out:
                        print(out["source"], flush=True)
            print(
                f"... {sum(counts.values())} programs, {time.time() - start:.0f}s: {dict(counts)}",
                flush=True,
            )
    summary = {
        "command": "PYTHONPATH=. python tests/fuzz/steps.py " + " ".join(sys.argv[1:]),
        "programs": args.programs,
        "first_seed": args.seed,
        "shares": shares,
        "calls_per_program": CALLS,
        "counts": dict(counts),
        "programs_with_replays": replayed,
        "seeds": dict(seeds),
        "seconds": round(time.time() - start),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0 if not seeds else 1


if __name__ == "__main__":
    sys.exit(main())
