"""The Python side of a full-size training-step compile, per phase, on the CPU.

    python benchmarks/train_compile_cpu.py --model gpt2 --batch 2 --seq 128 [--codegen triton]
        [--profile OUT.prof] [--json OUT.json]

The model is one of the benchmark's full-size hf models (``bench/suites.py``: transformers'
default GPT-2 config, or the 8-layer Llama of width 1024) at a small batch and sequence: the
compile's work hardly depends on them, and the CPU then runs the step cheaply. One training step
as the benchmark's ``--train`` runs it (dropout off, mean-square loss of the logits, backward),
float32, no autocast. Under ``--codegen triton`` with TRITON_INTERPRET=1 the kernels are Triton
source for Triton's interpreter: the generated code and every Python phase are the GPU's, only the
Triton compiler itself is not run; the launches are skipped unless ``--run-kernels`` (the
interpreter takes many minutes on a full-size step), so the step computes garbage.

Printed: CPU seconds (``--wall``: wall seconds) of each phase from ``torchkiln.report`` (aot,
lowering, scheduling, codegen, wrapper, cache_*), "run" = a second, already compiled step (the
extern kernels, such as the matmuls, run for real) and "capture" = the rest of the first step
(bytecode capture and guards). Wall seconds swell on a shared machine; "total_cpu_s" is this
process's CPU time for the first step (Triton's compile threads are not run here).
``--profile`` writes a cProfile of the first step. Run it with an empty TORCHKILN_CACHE_DIR for
a cold compile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _model(name: str, batch: int, seq: int):
    import torch
    import transformers
    from torchkiln.bench.suites import _hf_full
    from torchkiln.bench.train import _no_dropout

    make = _hf_full(transformers)[name][0]
    torch.manual_seed(0)
    model = _no_dropout(make()).train()
    model.config.use_cache = False
    ids = torch.randint(0, min(int(model.config.vocab_size), 1024), (batch, seq))
    return model, ids


class _CpuClock:
    """Stands in for the ``time`` module where the pipeline times its phases."""

    perf_counter = staticmethod(time.process_time)

    def __getattr__(self, name):
        return getattr(time, name)


def _phases_in_cpu_seconds() -> None:
    import torchkiln.pipeline
    import torchkiln_loop_ir.compile

    for module in (torchkiln.pipeline, torchkiln_loop_ir.compile):
        module.time = _CpuClock()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default="gpt2", choices=["gpt2", "llama", "bert", "t5_encoder", "distilbert"]
    )
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--codegen", default="triton", choices=["triton", "cpp"])
    ap.add_argument("--profile", default=None, help="write a cProfile of the compiled step here")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--wall",
        action="store_true",
        help="phases in wall seconds (default: CPU seconds of this process, which a "
        "loaded machine does not swell)",
    )
    ap.add_argument(
        "--run-kernels",
        action="store_true",
        help="run the Triton kernels in the interpreter (slow: minutes at full size); by "
        "default each launch is skipped, the step's values are garbage",
    )
    args = ap.parse_args()
    if args.codegen == "triton" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        sys.exit("--codegen triton on the CPU needs TRITON_INTERPRET=1")

    import torch
    import torchkiln
    from torchkiln.bench.train import loss_of

    model, ids = _model(args.model, args.batch, args.seq)
    if not args.wall:
        _phases_in_cpu_seconds()
    if args.codegen == "triton" and not args.run_kernels:
        from torchkiln_codegen_triton.wrapper import TritonCompiledKernel

        TritonCompiledKernel.__call__ = lambda self, *a: None  # compile time only

    def step(fn):
        model.zero_grad(set_to_none=True)
        loss_of(fn(ids)).backward()

    step(model)  # eager, once: one-time costs of the model's own code
    compiled = torchkiln.compile(model, options={"strict": True, "codegen": args.codegen})
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile(time.perf_counter if args.wall else time.process_time)
        prof.enable()
    begin, cpu = time.perf_counter(), time.process_time()
    step(compiled)
    total, cpu = time.perf_counter() - begin, time.process_time() - cpu
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    again = time.perf_counter() if args.wall else time.process_time()
    step(compiled)  # compiled already: what the first step's own run cost, roughly
    run = (time.perf_counter() if args.wall else time.process_time()) - again
    report = torchkiln.report(compiled)
    phases: dict[str, float] = {}
    for graph in report.graphs:
        for name, seconds in graph.phases.items():
            phases[name] = phases.get(name, 0.0) + seconds
    # capture and guards: the rest, less a second (compiled) step's time
    phases["run"] = run
    phases["capture"] = (total if args.wall else cpu) - sum(phases.values())
    result = {
        "model": args.model,
        "batch": args.batch,
        "seq": args.seq,
        "codegen": args.codegen,
        "total_s": total,
        "total_cpu_s": cpu,
        "phases": phases,
        "graphs": report.num_graphs,
        "kernels": report.num_kernels,  # launch sites
        "distinct_kernels": report.num_distinct_kernels,  # functions Triton compiles
        "torch": torch.__version__,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
