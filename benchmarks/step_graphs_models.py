"""Training steps under mode="reduce-overhead" (torchkiln's step graphs) against the default mode,
on the bench suites' models: each model compiled twice, each copy stepped with SGD on the same
batch, and every step's loss, gradients and parameters compared.

On the CPU the step graphs run through ``cudagraph_steps.RecomputingRecorder`` (a stand-in for
CUDA graphs that runs the graph again at each replay): both copies run the same kernels, so they
must agree bit for bit. On CUDA the graphs are real; the two copies must agree within
``--rtol`` (a replay runs the recorded kernels, which may pick other algorithms than the first
calls did), gradients relative to the step's largest one. A correctness check, not a speed
figure.

    python benchmarks/step_graphs_models.py --suite zoo,hf [--models bert] [--steps 5]
    python benchmarks/step_graphs_models.py --device cuda --size full --suite timm --batch 8
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import sys
import warnings

import torch
import torchkiln
from torchkiln import cudagraph_steps
from torchkiln.bench import suites
from torchkiln.bench.train import _no_dropout, loss_of


def _differ(a: torch.Tensor, b: torch.Tensor, rtol: float, scale: float) -> float | None:
    """The largest difference, relative to ``scale``, when it is above ``rtol`` (any difference
    when ``rtol`` is 0); None when they agree."""
    if rtol == 0:
        return None if torch.equal(a, b) else float((a - b).abs().max())
    worst = float((a.float() - b.float()).abs().max()) / (scale or 1.0)
    return worst if worst > rtol else None


def _largest(tensors: list[torch.Tensor]) -> float:
    return max((float(t.abs().max()) for t in tensors if t.numel()), default=0.0)


def check(spec, device: str, batch: int, steps: int, rtol: float) -> str:
    """Each step's loss, each gradient (relative to the largest of the step: a gradient that is
    zero in exact arithmetic, such as a key's bias before softmax, holds rounding noise alone,
    which differs between any two sets of kernels) and each parameter after the step (relative
    to the model's largest: session 50 and 51's H100 runs found BERT's key bias, about 1e-9
    after a step, 0.4 off relative to its own values at a step without a replay)."""
    torch.manual_seed(0)
    base, inputs = spec.build(batch)
    base = _no_dropout(base).train().to(device)
    inputs = tuple(v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs)
    plain_model, steps_model = copy.deepcopy(base), copy.deepcopy(base)
    plain = torchkiln.compile(plain_model)
    stepped = torchkiln.compile(steps_model, mode="reduce-overhead")
    models = (plain_model, steps_model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in models]
    for step in range(steps):
        losses = []
        for fn, optimizer in zip((plain, stepped), optimizers):
            optimizer.zero_grad()
            loss = loss_of(fn(*inputs))
            loss.backward()
            losses.append(loss.detach())
        if (d := _differ(losses[0], losses[1], rtol, float(losses[0].abs()))) is not None:
            return f"MISMATCH at step {step}: the loss differs by {d:.3g}"
        named = [(n, p) for n, p in plain_model.named_parameters() if p.grad is not None]
        scale = _largest([p.grad for _, p in named])
        others = dict(steps_model.named_parameters())
        for name, p in named:
            q = others[name].grad
            if q is None:
                return f"MISMATCH at step {step}: {name} has no gradient under reduce-overhead"
            if (d := _differ(p.grad, q, rtol, scale)) is not None:
                return f"MISMATCH at step {step}: the gradient of {name} differs by {d:.3g}"
        for optimizer in optimizers:
            optimizer.step()
        params = [p.detach() for p in plain_model.parameters()]
        largest = _largest(params)
        for (name, p), q in zip(plain_model.named_parameters(), steps_model.parameters()):
            if (d := _differ(p.detach(), q.detach(), rtol, largest)) is not None:
                return f"MISMATCH at step {step}: parameter {name} differs by {d:.3g}"
    graphs = torchkiln.report(stepped).graphs
    return f"ok, {steps} steps; CUDA graphs {', '.join(g.cudagraphs for g in graphs)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="zoo,hf")
    p.add_argument("--models", default="")
    p.add_argument("--size", default="small", choices=["small", "full"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rtol", type=float, default=None, help="default: 0 on the CPU, 1e-3 on CUDA")
    p.add_argument("--hang-s", type=float, default=0, help="dump every thread's stack after this")
    args = p.parse_args(argv)
    if args.hang_s:
        faulthandler.dump_traceback_later(args.hang_s, exit=True)
    warnings.simplefilter("ignore")
    rtol = args.rtol if args.rtol is not None else (0.0 if args.device == "cpu" else 1e-3)
    recorder = None
    if args.device == "cpu":
        recorder = cudagraph_steps.RecomputingRecorder()
        cudagraph_steps.RECORDER = recorder
    wanted = {m for m in args.models.split(",") if m}
    failed = 0
    for suite in args.suite.split(","):
        for spec in suites.load_suite(suite, args.size):
            if wanted and spec.name not in wanted:
                continue
            before = recorder.replays if recorder else 0
            verdict = check(spec, args.device, args.batch, args.steps, rtol)
            failed += verdict.startswith("MISMATCH")
            replays = f"; {recorder.replays - before} replays" if recorder else ""
            print(f"{suite}/{spec.name}: {verdict}{replays}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
