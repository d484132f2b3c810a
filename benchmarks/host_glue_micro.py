"""Per-call host cost of the glue around a compiled graph's kernels, on the CPU, against the bare
operation it wraps: an extern call (loop-ir's generated function with its layout check) against
the ATen kernel alone (and a convolution through its Python binding against the operator's C++
function, wrapper.python_binding), channels_last's weight lookup, the folded constants' key, the training
Function's glue per step. Run it on two trees back to back to compare (the machine is shared:
each figure is the best of many interleaved blocks).

    python benchmarks/host_glue_micro.py
"""

from __future__ import annotations

import timeit

import sympy
import torch


def _best_us(cases: dict, number: int, rounds: int = 15) -> dict:
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):
        for name, fn in cases.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number * 1e6)
    return best


def externs() -> dict:
    from torchkiln_loop_ir.backend import BufferRef, BufferSpec, ExternCall
    from torchkiln_loop_ir.wrapper import make_extern

    aten = torch.ops.aten

    def spec(size, stride):
        return BufferSpec(
            "out",
            torch.float32,
            torch.device("cpu"),
            tuple(map(sympy.Integer, size)),
            tuple(map(sympy.Integer, stride)),
        )

    a, b, x = torch.randn(2, 3), torch.randn(3, 2), torch.randn(4, 4)
    mm = make_extern(
        ExternCall(aten.mm.default, (BufferRef("a"), BufferRef("b")), {}, ("o",)),
        [spec((2, 2), (2, 1))],
    )
    sort = make_extern(
        ExternCall(aten.sort.default, (BufferRef("x"),), {}, ("v", "i")),
        [spec((4, 4), (4, 1)), spec((4, 4), (4, 1))],
    )
    mm_op, sort_op = aten.mm.default, aten.sort.default
    # a convolution: the extern goes through torch.convolution (wrapper.python_binding), where
    # the operator's C++ function converts the four list arguments by its schema
    img, w = torch.randn(1, 8, 4, 4), torch.randn(8, 8, 1, 1)
    conv_args = (None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    conv = make_extern(
        ExternCall(
            aten.convolution.default, (BufferRef("x"), BufferRef("w"), *conv_args), {}, ("o",)
        )
    )
    conv_op = aten.convolution.default._op
    return {
        "extern mm (layout checked)": lambda: mm(a, b),
        "bare aten.mm": lambda: mm_op(a, b),
        "extern sort, 2 outputs (layouts checked)": lambda: sort(x),
        "bare aten.sort": lambda: sort_op(x),
        "extern convolution (through torch.convolution)": lambda: conv(img, w),
        "aten.convolution.default's C++ function": lambda: conv_op(img, w, *conv_args),
        "torch.convolution": lambda: torch.convolution(img, w, *conv_args),
    }


def weights() -> dict:
    from torchkiln_loop_ir.channels_last import _weight

    w = torch.randn(64, 32, 3, 3)
    return {"channels_last _weight (cached)": lambda: _weight(w)}


def folded_key() -> dict:
    from torchkiln_aot_partition.freezing import FoldedConstants

    args = [torch.randn(3) for _ in range(300)]
    folded = FoldedConstants(None, tuple(range(250)), ())
    return {"folded constants key, 250 sources": lambda: folded.key(args)}


def training_glue() -> dict:
    from torchkiln_aot_partition import runtime as R

    params = tuple(torch.randn(4, requires_grad=True) for _ in range(200))
    saved = [torch.randn(4) for _ in range(250)] + [p.detach() for p in params[:50]]
    grads = [torch.randn(4) for _ in range(200)]
    out = torch.randn(4)

    class Backward:
        def call_boxed(self, args):
            args.clear()
            return list(grads)

    backward = Backward()
    state = R._BackwardState(None, lambda gm, args: backward, compiled=backward, num_saved=300)
    plan = R.TrainingPlan(
        lambda *args: [out.clone(), *saved], state, 1, (), (0,), tuple(range(200)), 300, 201
    )
    runtime = R.TrainingRuntime(plan, params)
    x = torch.randn(4)

    def step():
        for p in params:
            p.grad = None
        (o,) = runtime(x)
        o.sum().backward()

    return {"training step through the runtime (200 params, 300 saved, no-op graphs)": step}


def main() -> None:
    for cases, number in (
        (externs(), 5000),
        (weights(), 5000),
        (folded_key(), 300),
        (training_glue(), 30),
    ):
        for name, us in _best_us(cases, number).items():
            print(f"{us:9.2f} us  {name}")


if __name__ == "__main__":
    main()
