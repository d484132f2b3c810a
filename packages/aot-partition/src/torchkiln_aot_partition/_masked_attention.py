"""Masked attention on CUDA traced to the memory-efficient fused kernel, not to the math path.

``scaled_dot_product_attention`` decomposes while tracing: which kernel it becomes is chosen for
the traced (fake) tensors. Given a mask, the choice made there is the math path (two batched
matrix multiplies and a softmax, upcast to float32 for 16-bit inputs): BERT-base at 16 x 512 in
bfloat16 spent 4.6 ms of its 11 ms in float32 ``bmm`` without tensor cores, where eager (whose
Hugging Face mask is dropped when it is all ones) runs cuDNN's fused kernel in 0.4 ms. A
compiler must not make attention slower because tracing kept the mask.

While ``MaskedAttention`` is active (both traces: inference and the joint forward+backward),
``scaled_dot_product_attention`` with a mask on CUDA, in float16, bfloat16 or float32 (the
kernel eager itself runs for float32 attention it accepts: T5-base's encoder at 16 x 512 in
float32 ran 0.6% behind torch.compile on the math path), of a kind torch's
fused kernels refuse (``_unusual_mask``: broadcast along the queries, or strided along the keys)
and for which torch's own dispatch picks the math path (``torch_picks_math``), runs as
``aten._scaled_dot_product_efficient_attention`` with the mask as an additive bias, as eager's
own dispatch does when it picks that kernel: a boolean mask becomes 0 / -inf in the query's
dtype, built once per mask (every layer reads the same one), and expanded to (batch, heads, query
length, key length); a key length that is not a multiple of 16 is padded with masked-out keys
for the kernel's aligned bias rows.
Its backward is the kernel's own (autograd pairs them; ``trace.paired_for_autograd`` keeps the
forward whole). Every other call (no mask, CPU, float64, dropout, causal with a mask, grouped
query heads, head sizes the kernel does not take) is left to torch's own choice.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.nn.attention import SDPBackend
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten

_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
#: the kernel's aligned bias rows (torch's own ``preprocess_mask`` pads to this too)
BIAS_ALIGN = 16


def _eligible(
    q: Any, k: Any, v: Any, mask: Any, dropout_p: float, is_causal: bool, enable_gqa: bool
) -> bool:
    tensors = (q, k, v, mask)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return False
    if k.dtype != q.dtype or v.dtype != q.dtype or q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if mask.dtype not in (torch.bool, q.dtype) or mask.dim() > 4:
        return False
    if dropout_p != 0.0 or is_causal or enable_gqa or q.shape[1] != k.shape[1]:
        return False
    head, value_head = q.shape[-1], v.shape[-1]
    return all(isinstance(h, int) and h % 8 == 0 and h <= 256 for h in (head, value_head))


def _unusual_mask(mask: torch.Tensor) -> bool:
    """A mask of the kinds torch's fused kernels refused on the H200: broadcast along the query
    dimension (a padding mask expanded from (batch, 1, 1, keys): BERT, DistilBERT) or not
    contiguous along the keys (T5's permuted position bias). A full mask (GPT-2's and Llama's
    causal masks) is left to torch, which runs cuDNN's kernel on it (2.6 ms against the
    memory-efficient kernel's 6.1 ms for a GPT-2 training step): if asking torch's choice inside
    a trace ever answered "math" for those, they would still not be rerouted."""
    if mask.dim() < 2:
        return True
    strides, sizes = mask.stride(), mask.shape
    query_broadcast = (
        isinstance(sizes[-2], int) and sizes[-2] > 1 and strides[-2] == 0 or sizes[-2] == 1
    )
    keys_strided = isinstance(sizes[-1], int) and sizes[-1] > 1 and strides[-1] != 1
    return bool(query_broadcast or keys_strided)


def torch_picks_math(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None
) -> bool:
    """Whether torch's own dispatch picks the math path for this call (asked outside the trace,
    so the question leaves no node): only then is the call rerouted. A fused kernel torch picks
    itself (cuDNN's, for GPT-2's causal mask: 2.6 ms forward and backward against the
    memory-efficient kernel's 6.1 ms on the H200) is left alone; so is a call it cannot answer."""
    try:
        with disable_proxy_modes_tracing():
            choice = torch._fused_sdp_choice(q, k, v, mask, 0.0, False, scale=scale)
    except Exception:  # noqa: BLE001 - no answer: leave the call to torch
        return False
    return int(choice) == int(SDPBackend.MATH.value)


def _bias(mask: torch.Tensor, q: torch.Tensor, length: int, extra: int) -> torch.Tensor:
    """The additive bias of ``mask`` in ``q``'s dtype over ``length + extra`` keys (the extra
    keys masked out)."""
    bias = mask
    if mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        bias = torch.where(
            mask, zero, torch.full((), float("-inf"), dtype=q.dtype, device=q.device)
        )
    if bias.shape[-1] != length:  # broadcast over the keys
        bias = bias.expand(*bias.shape[:-1], length)
    if extra:
        bias = F.pad(bias, (0, extra), value=float("-inf"))
    if not _aligned(bias):
        # the kernel reads bias rows of stride 1 at 16-element aligned starts: T5's position
        # bias (a permuted view) failed at run time with "last dimension must be contiguous"
        bias = bias.contiguous()
    return bias


def _aligned(bias: torch.Tensor) -> bool:
    """Whether the kernel can read ``bias`` as it is: last dimension of stride 1 and every other
    stride (but a broadcast 0) a multiple of 16 elements; a symbolic stride counts as not."""
    strides = bias.stride()
    if not all(isinstance(s, int) for s in strides):
        return False
    if bias.dim() and bias.shape[-1] != 1 and strides[-1] != 1:
        return False
    return all(s % BIAS_ALIGN == 0 for s in strides[:-1])


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float | None,
    biases: dict[int, tuple[torch.Tensor, torch.Tensor]],
) -> torch.Tensor:
    """Attention of ``q, k, v`` with ``mask`` through the memory-efficient fused kernel.

    The kernel reads the bias in rows aligned to 16 elements: with a key length that is not a
    multiple of 16, the keys and values get zero rows and the bias -inf columns up to the next
    multiple (each padded key has weight 0, so the result is the same). ``biases`` holds the
    bias built for each mask, by identity: every layer of a model reads the same mask, and its
    bias is computed once per graph."""
    length = k.shape[2]
    extra = (-length) % BIAS_ALIGN if isinstance(length, int) else 0
    key = id(mask)
    if key not in biases:
        biases[key] = (
            mask,
            _bias(mask, q, length, extra),
        )  # the mask is held: its id stays its own
    bias = biases[key][1]
    if extra:
        k = F.pad(k, (0, 0, 0, extra))
        v = F.pad(v, (0, 0, 0, extra))
    bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], length + extra)
    needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, needs_lse, 0.0, False, scale=scale
    )[0]


class MaskedAttention(TorchFunctionMode):
    """While active, masked float16, bfloat16 or float32 attention on CUDA that torch would
    run on its math path traces to the memory-efficient kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.biases: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SDPA:
            bound = dict(zip(_NAMES, args))
            bound.update(kwargs)
            q, k, v = bound.get("query"), bound.get("key"), bound.get("value")
            mask = bound.get("attn_mask")
            if (
                _eligible(
                    q,
                    k,
                    v,
                    mask,
                    float(bound.get("dropout_p", 0.0)),
                    bool(bound.get("is_causal", False)),
                    bool(bound.get("enable_gqa", False)),
                )
                and _unusual_mask(mask)
                and torch_picks_math(q, k, v, mask, bound.get("scale"))
            ):
                return masked_attention(q, k, v, mask, bound.get("scale"), self.biases)
        return func(*args, **kwargs)
