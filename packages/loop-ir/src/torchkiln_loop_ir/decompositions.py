"""The decomposition table aot-partition applies before handing graphs to loop-ir.

torch's core ATen decompositions, plus composite ops (softmax, norms, activations) decomposed into
pointwise + reduction ATen ops that loop-ir lowers, minus ops loop-ir keeps whole because it runs
them as extern kernels (matrix multiplies, convolution, attention) or lowers them directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

# Composite ops decomposed into ops we lower (those absent from a torch version are skipped).
_EXTRA = [
    "_softmax",
    "_log_softmax",
    "native_layer_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional",
    "rms_norm",
    "_fused_rms_norm",
    "native_group_norm",
    "gelu",
    "silu",
    "mish",
    "hardswish",
    "hardsigmoid",
    "hardtanh",
    "elu",
    "leaky_relu",
    "softplus",
    "logsumexp",
    "addcmul",
    "addcdiv",
    "lerp",
    "_softmax_backward_data",
    "_log_softmax_backward_data",
    "gelu_backward",
    "silu_backward",
    "native_layer_norm_backward",
    "threshold_backward",
    "sigmoid_backward",
    "tanh_backward",
    "native_dropout_backward",
    "nll_loss_forward",
    "nll_loss_backward",
    "linalg_vector_norm",
    "clamp_min",
    "clamp_max",
]

# Kept whole: extern kernels, and ops we lower directly (their decompositions are slower or
# produce ops we would fall back on).
_KEEP = [
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "convolution",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_cudnn_attention",
    "cumsum",
    "convolution_backward",
    "max_pool2d_with_indices_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "embedding",
    "var_mean",
    "var",
    "std",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "clamp",
    "where",
    "index_select",
    "gather",
    "cat",
    "split",
    "split_with_sizes",
    "unbind",
    "expand",
    "permute",
]


def _crop_then_pad(x: torch.Tensor, pad: list[Any], value: Any = 0) -> Any:
    """``constant_pad_nd`` with a negative pad (a crop: the backward of a pad is one) as
    ``narrow``s, then the positive rest as a ``constant_pad_nd`` loop-ir lowers (NotImplemented,
    so kept whole, when no pad is negative). ATen's own kernel asks its input for a
    ``storage_offset()``, which a tensor of symbolic strides refuses: Longformer's training
    step under dynamic shapes failed its joint trace there ("Cannot call storage_offset() on
    tensor with symbolic sizes/strides")."""
    if not any(p < 0 for p in pad):
        return NotImplemented
    out, rest = x, list(pad)
    for k in range(len(pad) // 2):
        dim = x.dim() - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        if before < 0:
            out = out.narrow(dim, -before, out.shape[dim] + before)
            rest[2 * k] = 0
        if after < 0:
            out = out.narrow(dim, 0, out.shape[dim] + after)
            rest[2 * k + 1] = 0
    if any(p > 0 for p in rest):
        return aten.constant_pad_nd.default(out, rest, value)
    return out.clone()


#: decompositions of our own, applied after torch's (``decompositions``)
_OWN = {aten.constant_pad_nd.default: _crop_then_pad}


def _packets(names: Iterable[str]) -> list[Any]:
    out = []
    for name in names:
        packet = getattr(aten, name, None)
        if packet is not None:
            out.append(packet)
    return out


def decompositions(
    extra: Iterable[Any] = (), keep: Iterable[Any] = ()
) -> dict[Any, Callable[..., Any]]:
    """The table ``{OpOverload: decomposition}`` to trace with (``make_fx(decomposition_table=...)``).

    ``extra``: more ops (packets or overloads) to decompose; ``keep``: more ops not to decompose.
    """
    table = dict(_base_table())
    table.update(get_decompositions(_packets(_EXTRA) + list(extra)))
    kept = set(_packets(_KEEP)) | set(keep)
    for op in list(table):
        if op in kept or getattr(op, "overloadpacket", None) in kept:
            del table[op]
    for op, fn in _OWN.items():
        if op not in kept and op.overloadpacket not in kept:
            table.setdefault(op, fn)
    return table


@functools.cache
def _base_table() -> dict[Any, Callable[..., Any]]:
    """torch's core ATen table, materialised once (building it takes seconds)."""
    core = core_aten_decompositions()
    # torch >= 2.6 returns a lazily materialised table object; a plain dict is what make_fx wants.
    return dict(core.items()) if hasattr(core, "items") else dict(core)
