"""The guard check of a compiled model, per call, on the CPU: every call of a compiled function
runs it first. Prints the guard count, the constant tuples the check remembers (guards 0.4.3:
a convolution's stride, padding, dilation), and the best time per check of the generated
function as compiled, then of the same guards compiled without the tuple groups, alternating
blocks of each in one process (load that drifts on a shared machine hits both alike).

    python benchmarks/guard_check_time.py --suite conv --model mobilenet
    python benchmarks/guard_check_time.py --suite timm --model mobilenetv3_large_100   # timm
                                                          # (which imports torchvision)

The model is the suite's small config (``--size full`` for the full one: the guards are the
same, only the tensors' sizes differ).
"""

from __future__ import annotations

import argparse
import gc
import timeit
from unittest import mock

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="conv")
    parser.add_argument("--model", default="mobilenet")
    parser.add_argument("--size", default="small")
    parser.add_argument("--number", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    import torchkiln
    from torchkiln.bench.suites import load_suite
    from torchkiln_dynamo_capture.wrapper import CapturedFunction
    from torchkiln_guards import compile as guard_compile

    (spec,) = [s for s in load_suite(args.suite, args.size) if s.name == args.model]
    model, inputs = spec.build(1 if args.size == "full" else 2)
    model = model.eval()
    compiled = torchkiln.compile(model, options={"graph_cache": False})
    with torch.no_grad():
        compiled(*inputs)
        (fn,) = [o for o in gc.get_objects() if isinstance(o, CapturedFunction)]
        (entry,) = fn.entries
        seen: list = []
        check = entry.check
        entry.check = lambda *a, **k: seen.append((a, k)) or check(*a, **k)
        compiled(*inputs)  # the arguments the check is called with
        entry.check = check
    call_args, call_kwargs = seen[0]
    guards = entry.guards
    groups = guard_compile._constant_tuples(guards.guards)
    grouped = sum(len(g) for g in groups.values())
    print(
        f"{args.suite}/{args.model}: {len(guards.guards)} guards, {len(groups)} constant "
        f"tuples holding {grouped} of them"
    )
    with mock.patch.object(guard_compile, "_constant_tuples", lambda ordered: {}):
        plain = guard_compile.compile_guards(
            guards.guards,
            signature=guards.signature,
            f_globals=guards._f_globals,
            closure=guards._closure,
        )
    variants = {"tuples remembered": guards.check, "every guard each call": plain.check}
    best = {name: float("inf") for name in variants}
    with torch.no_grad():  # the grad mode the entry was captured under (a guard reads it)
        for name, f in variants.items():
            assert f(*call_args, **call_kwargs) is True, name
        for _ in range(args.repeat):
            for name, f in variants.items():
                t = timeit.timeit(lambda f=f: f(*call_args, **call_kwargs), number=args.number)
                best[name] = min(best[name], t / args.number)
    for name, seconds in best.items():
        print(
            f"  {name:24s} {seconds * 1e6:8.2f} us per check (best of {args.repeat} x {args.number})"
        )


if __name__ == "__main__":
    main()
