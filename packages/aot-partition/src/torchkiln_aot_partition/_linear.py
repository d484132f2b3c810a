"""``F.linear`` on inputs of symbolic size, traced without specializing the size.

ATen's C++ ``linear`` reads its input's sizes as plain ints under functionalization, which turns
every symbolic size it sees (the sequence length of a transformer) into a constant and a guard:
BERT, GPT-2 and DistilBERT then recompiled for every sequence length. With symbolic sizes this
mode computes linear the way ATen's fused path does, from symbolic sizes: ``addmm`` on the input
flattened to 2-D, viewed back. Static sizes keep ATen's own linear (nothing changes there).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_LINEAR = (torch._C._nn.linear, torch.nn.functional.linear)


def _has_symbolic_size(t: object) -> bool:
    return isinstance(t, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in t.shape)


class SymbolicLinear(TorchFunctionMode):
    """While active, ``linear(x, w, b)`` of a symbolic-size ``x`` runs as addmm/mm + view."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _LINEAR and _has_symbolic_size(args[0] if args else kwargs.get("input")):
            names = ("input", "weight", "bias")
            bound = dict(zip(names, args))
            bound.update(kwargs)
            x, w, b = bound["input"], bound["weight"], bound.get("bias")
            if x.dim() == 1:
                out = torch.mv(w, x)
                return out if b is None else out + b
            flat = x.reshape(-1, x.shape[-1])
            out = torch.mm(flat, w.t()) if b is None else torch.addmm(b, flat, w.t())
            return out.view(*x.shape[:-1], w.shape[0])
        return func(*args, **kwargs)
