"""Where a full-size training-step compile spends its wall time on the GPU machine, per phase,
with codegen-triton's options overridable (to see what a heuristic change costs in compile time).

    python3 benchmarks/gpu_compile_phases.py --model bert [--triton persistent_rnumel=1024 ...]
        [--triton compile_in_processes=false compile_workers=16]

One step as the benchmark's ``--train`` runs it (bfloat16 autocast, dropout off, loss, backward)
at the bench's full-size batch and sequence. Printed: the first step's wall seconds, each phase
of ``torchkiln.report`` (aot, lowering, scheduling, codegen, wrapper, ...; "triton" = Triton's
own compile of the kernels, which the pipeline waits for), and the rest ("capture and run");
"kernels" (launch sites), "distinct_kernels" (the functions Triton compiles: launch sites of
identical code share one) and "precompiled" (the warmups ``precompile`` ran: one per distinct
function and first-launch specialization known before the call).
Use a fresh TORCHKILN_CACHE_DIR and TRITON_CACHE_DIR per run for a cold compile.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import time

import torch


def _option_value(text: str) -> int | bool | None:
    """``--triton`` values: true/false (compile_in_processes=false), none, else an int."""
    words = {"true": True, "false": False, "none": None}
    return words[text.lower()] if text.lower() in words else int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument(
        "--triton",
        nargs="*",
        default=[],
        help="TritonOptions overrides, name=value (an int, true/false or none)",
    )
    ap.add_argument("--hang-s", type=float, default=280)
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)

    import torchkiln
    import transformers
    from torchkiln.bench.suites import _hf_full
    from torchkiln.bench.train import _no_dropout, loss_of
    from torchkiln_codegen_triton import TritonOptions, compile_pool
    from torchkiln_codegen_triton import backend as triton_backend

    warmed: list[int] = []  # what each graph's precompile compiled ahead
    precompile = triton_backend.precompile

    def counted(kernels, workers=None, processes=False):
        warmed.append(precompile(kernels, workers, processes))
        return warmed[-1]

    triton_backend.precompile = counted

    torch.manual_seed(0)
    model = _no_dropout(_hf_full(transformers)[args.model][0]()).train().cuda()
    model.config.use_cache = False
    ids = torch.randint(
        0, min(int(model.config.vocab_size), 1024), (args.batch, args.seq), device="cuda"
    )
    overrides = {k: _option_value(v) for k, v in (kv.split("=") for kv in args.triton)}

    def step(fn) -> None:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16):
            loss = loss_of(fn(ids))
        loss.backward()
        torch.cuda.synchronize()

    step(model)
    compiled = torchkiln.compile(
        model, options={"strict": True, "triton_options": TritonOptions(**overrides)}
    )
    begin = time.perf_counter()
    step(compiled)
    total = time.perf_counter() - begin
    phases: dict[str, float] = {}
    report = torchkiln.report(compiled)
    for graph in report.graphs:
        for name, seconds in graph.phases.items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 3)
    phases["capture and run"] = round(total - sum(phases.values()), 3)
    print(
        json.dumps(
            {
                "model": args.model,
                "triton": overrides,
                "first_step_s": round(total, 2),
                "phases": phases,
                "kernels": report.num_kernels,
                "distinct_kernels": report.num_distinct_kernels,
                "precompiled": sum(warmed),
                # why compile worker processes were turned off (a cache key they could not
                # reproduce), or None: then they compiled, or were never asked to
                "compile_workers_off": compile_pool.reason_off(),
                "compile_workers": compile_pool.stats,
            }
        )
    )


if __name__ == "__main__":
    main()
