"""Route batch norm to ATen ops whose schemas declare their running-stat mutations.

torch.batch_norm reaches aten.native_batch_norm, whose schema does not mark running_mean /
running_var as mutated, so functionalization would silently drop the running-stat update.
A TorchFunctionMode sits above functionalization and calls _native_batch_norm_legit (annotated
Tensor(a!)) instead, which functionalizes into a functional op plus copies we turn into outputs.
"""

from __future__ import annotations

import torch
from torch._prims_common import suggest_memory_format
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten


# Modes are disabled while they handle a call, so F.batch_norm must be caught itself:
# its inner torch.batch_norm call would not reach us.
_SIGNATURES = {
    torch.batch_norm: (
        "input",
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "training",
        "momentum",
        "eps",
        "cudnn_enabled",
    ),
    torch.nn.functional.batch_norm: (
        "input",
        "running_mean",
        "running_var",
        "weight",
        "bias",
        "training",
        "momentum",
        "eps",
    ),
}


class BatchNormAsLegit(TorchFunctionMode):
    """While active, torch.batch_norm(...) runs as the matching aten._native_batch_norm_legit* op."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        names = _SIGNATURES.get(func)
        if names is not None:
            bound = dict(zip(names, args))
            bound.update(kwargs)
            for key, default in (
                ("weight", None),
                ("bias", None),
                ("training", False),
                ("eps", 1e-5),
            ):
                bound.setdefault(key, default)
            bound.setdefault("momentum", 0.1)
            x, w, b = bound["input"], bound["weight"], bound["bias"]
            rm, rv = bound["running_mean"], bound["running_var"]
            training, momentum, eps = bool(bound["training"]), bound["momentum"], bound["eps"]
            momentum = 0.0 if momentum is None else momentum
            if statically_known_true(x.numel() == 0):
                return _empty_batch_norm(x, w, b)
            if rm is None or rv is None:
                out = aten._native_batch_norm_legit.no_stats(x, w, b, training, momentum, eps)[0]
            elif training:
                out = aten._native_batch_norm_legit.default(x, w, b, rm, rv, True, momentum, eps)
                out = out[0]
            else:
                out = _eval_batch_norm(x, w, b, rm, rv, eps)
            return _eager_layout(out, x)
        return func(*args, **kwargs)


def _eager_layout(out, x):
    """``out`` laid out as eager's batch norm lays its output: dense in the input's suggested
    memory format (channels-last or contiguous), whatever the input's strides. The meta
    functions keep the input's strides instead (a transposed input gives a transposed output),
    and a ``.contiguous()`` of the output then copies in the trace where eager's returns the
    output itself: a later in-place write to the output showed through eager's and not ours
    (fuzz seed 953194). Only where no dim has size 1: there eager's kernels do not follow one
    rule (on the CPU a (1, 5, 1, 3) input of strides (15, 1, 5, 5) keeps its order), and the
    meta's strides are left as they are."""
    if any(not statically_known_true(size > 1) for size in x.shape):
        return out
    return out.contiguous(memory_format=suggest_memory_format(x))


def _empty_batch_norm(x, w, b):
    """Batch norm of no element, as ATen's ``_batch_norm_impl_index`` computes it: the input
    scaled by the first weight and shifted by the first bias, and the running statistics left
    as they are (the statistics of nothing are NaN: the decomposition wrote NaN into them)."""
    out = x.clone()
    if w is not None:
        out = out * w[0]
    if b is not None:
        out = out + b[0]
    return out


def _eval_batch_norm(x, w, b, running_mean, running_var, eps):
    """Eval-mode batch norm in pointwise torch ops (its ATen ops decompose to a 'mutating' schema)."""
    shape = [1, -1] + [1] * (x.dim() - 2)
    out = (x - running_mean.reshape(shape)) * torch.rsqrt(running_var.reshape(shape) + eps)
    if w is not None:
        out = out * w.reshape(shape)
    if b is not None:
        out = out + b.reshape(shape)
    return out
