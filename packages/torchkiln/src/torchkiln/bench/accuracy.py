"""Accuracy against an fp64 eager reference (the rule of the PyTorch compiler benchmarks).

For each output tensor: ``error(x) = RMSE(x, fp64 reference)``. The compiled output passes when
``error(compiled) <= multiplier * error(eager) + tolerance``, multiplier 2 (3 for tiny tensors of at
most ``TINY_NUMEL`` elements, whose RMSE is noisy) and a floor ``tolerance`` by dtype, so that an
eager error of exactly zero does not demand bit-exact compiled results.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

TINY_NUMEL = 10
TOLERANCE = {
    torch.float64: 1e-7,
    torch.float32: 1e-5,
    torch.bfloat16: 1e-2,
    torch.float16: 1e-2,
}


def tolerance(dtype: torch.dtype) -> float:
    return TOLERANCE.get(dtype, 1e-5)


def rmse(value: torch.Tensor, reference: torch.Tensor) -> float:
    diff = value.detach().to(torch.float64) - reference.detach().to(value.device, torch.float64)
    if diff.numel() == 0:
        return 0.0
    return float(diff.pow(2).mean().sqrt())


def flatten_outputs(value: Any) -> list[torch.Tensor]:
    """The tensors of a model's output, in a stable order (tuples, lists, dicts, ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for key in value for t in flatten_outputs(value[key])]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flatten_outputs(item)]
    return []


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str  # the worst output's errors, for a failing row

    @property
    def text(self) -> str:
        return "pass" if self.passed else "fail"


def compare(compiled: Any, eager: Any, reference: Any, dtype: torch.dtype) -> Verdict:
    """Judge ``compiled`` against the fp64 ``reference`` relative to ``eager``'s own error."""
    outs, eagers, refs = (
        flatten_outputs(compiled),
        flatten_outputs(eager),
        flatten_outputs(reference),
    )
    if not (len(outs) == len(eagers) == len(refs)):
        return Verdict(False, f"output count differs: compiled {len(outs)}, eager {len(eagers)}")
    for i, (out, eag, ref) in enumerate(zip(outs, eagers, refs, strict=True)):
        if out.shape != eag.shape:
            return Verdict(
                False, f"output {i}: shape {tuple(out.shape)} != eager {tuple(eag.shape)}"
            )
        if not out.is_floating_point() and not out.is_complex():
            if not torch.equal(out.cpu(), eag.cpu()):
                return Verdict(False, f"output {i}: integer values differ from eager")
            continue
        eager_error, compiled_error = rmse(eag, ref), rmse(out, ref)
        if math.isnan(compiled_error) and not math.isnan(eager_error):
            return Verdict(False, f"output {i}: NaN where eager has none")
        if math.isnan(eager_error):
            continue
        multiplier = 3.0 if out.numel() <= TINY_NUMEL else 2.0
        if compiled_error > multiplier * eager_error + tolerance(dtype):
            return Verdict(
                False,
                f"output {i}: rmse {compiled_error:.3g} > {multiplier:g} x eager "
                f"{eager_error:.3g} + {tolerance(dtype):g}",
            )
    return Verdict(True, "")


def fp64_copy(
    model: torch.nn.Module, inputs: tuple[Any, ...]
) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """A deep copy of the model and inputs in float64 (integer inputs are left as they are)."""
    model64 = copy.deepcopy(model).to(torch.float64)

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().clone().to(torch.float64)
        return copy.deepcopy(value)

    return model64, tuple(cast(v) for v in inputs)
