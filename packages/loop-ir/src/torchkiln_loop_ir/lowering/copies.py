"""``aten.copy(dst, src)``: the functional form of ``dst.copy_(src)`` that functionalization leaves
(batch-norm running statistics, in-place updates of inputs): ``src`` cast to ``dst``'s dtype and
broadcast to its shape; ``dst``'s values are not read."""

from __future__ import annotations

from ..errors import Unlowerable
from ..ir import IRNode
from . import aten, register_lowering
from .pointwise import _to_copy


@register_lowering(aten.copy.default)
def copy(ctx, dst, src, non_blocking=False):
    if isinstance(src, IRNode) and src.get_device() != ctx.device:
        raise Unlowerable("copy across devices")
    return _to_copy(ctx, src)
