"""``ReferenceBackend``: runs KernelSpecs with torch, no compiler needed.

Each kernel is evaluated vectorized over its whole index space: index symbols become broadcast
``arange`` tensors (x dims first, then r dims), a load gathers from the flat storage of its
buffer, a reduction reduces over the r dims, a store scatters into the flat storage. Stages run in
order, so a value stored by an earlier node is seen by later loads. It is slow, simple, and the
correctness oracle for the real code generators.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from .backend import BackendCapabilities, KernelSpec
from .handlers import DefaultHandler
from .indexing import FloorDiv, ModularIndexing, index_symbol
from .ops import POINTWISE_OPS, set_ops_handler


def eval_index(expr: Any, env: dict[sympy.Symbol, Any]) -> Any:
    """Evaluate a sympy index expression with symbols bound to ints or integer tensors."""
    if isinstance(expr, (int, bool)):
        return expr
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return env[expr]
    args = [eval_index(a, env) for a in expr.args]
    if expr.is_Add:
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if expr.is_Mul:
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, ModularIndexing):
        return (args[0] // args[1]) % args[2]
    if isinstance(expr, sympy.Mod):
        return args[0] % args[1]
    if isinstance(expr, sympy.floor) and isinstance(expr.args[0], sympy.Mul):
        return eval_index(expr.args[0], env)
    if isinstance(expr, sympy.Pow):
        return args[0] ** args[1]
    if isinstance(expr, (sympy.Min, sympy.Max)):
        fn = torch.minimum if isinstance(expr, sympy.Min) else torch.maximum
        out = torch.as_tensor(args[0])
        for a in args[1:]:
            out = fn(out, torch.as_tensor(a))
        return out
    if expr.is_Relational:
        ops_ = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
        return getattr(torch, ops_[expr.rel_op])(torch.as_tensor(args[0]), torch.as_tensor(args[1]))
    raise NotImplementedError(f"index expression {expr!r} ({type(expr).__name__})")


_TORCH_FNS = {
    "truediv": torch.true_divide,
    "floordiv": torch.floor_divide,
    "mod": torch.fmod,
    "erfinv": torch.special.erfinv,
    "square": torch.square,
    "relu": torch.relu,
}


def _torch_fn(name: str) -> Any:
    return _TORCH_FNS.get(name) or getattr(torch, name, None)


class TorchOpsHandler(DefaultHandler):
    """The vectorized torch implementation of every op in ops.py (pointwise ops by the torch
    function of the same name, in ``default``)."""

    default_ops = frozenset(n for n in POINTWISE_OPS if _torch_fn(n) is not None)
    shape: list[int]  # the kernel's x then r ranges, set before a body runs

    def __init__(
        self,
        storages: dict[str, torch.Tensor],
        env: dict[sympy.Symbol, Any],
        ndim: int,
        nx: int,
        device: torch.device,
    ) -> None:
        self.storages = storages
        self.env = env
        self.ndim = ndim
        self.nx = nx
        self.device = device
        self.mask: torch.Tensor | None = None
        self._indirect = 0

    def _index(self, index: Any) -> torch.Tensor:
        idx = torch.as_tensor(eval_index(sympy.sympify(index), self.env), device=self.device)
        if self.mask is not None:
            idx = torch.where(self.mask, idx, 0)
        return idx.long()

    def load(self, name: str, index: Any) -> torch.Tensor:
        flat = self.storages[name]
        idx = self._index(index)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= flat.numel()):
            raise IndexError(f"load of {name} at {index} out of bounds ({flat.numel()} elements)")
        return flat[idx]

    def store(self, name: str, index: Any, value: Any, mode: str | None = None) -> None:
        flat = self.storages[name]
        idx = self._index(index)
        value = torch.as_tensor(value, device=self.device)
        idx, value = torch.broadcast_tensors(idx, value)
        flat.index_put_(
            (idx.reshape(-1),), value.reshape(-1).to(flat.dtype), accumulate=mode == "atomic_add"
        )

    store_reduction = store

    def _rows(self, value: Any) -> torch.Tensor:
        """``value`` as [x..., r-flat]: the values each output reduces."""
        value = torch.as_tensor(value, device=self.device)
        while value.dim() < self.ndim:
            value = value.unsqueeze(0)
        full = [int(e) for e in self.shape]
        return value.expand(full).reshape(full[: self.nx] + [-1])

    def reduction(
        self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any
    ) -> Any:
        full = [int(e) for e in self.shape]
        keep = full[: self.nx] + [1] * (self.ndim - self.nx)
        if reduction_type == "welford_combine":
            m, m2, w = (self._rows(t).double() for t in value)
            weight = w.sum(-1)
            mean = (w * m).sum(-1) / weight
            m2 = (m2 + w * (m - mean.unsqueeze(-1)) ** 2).sum(-1)
            return tuple(t.to(dtype).reshape(keep) for t in (mean, m2, weight))
        v = self._rows(value)
        if reduction_type == "sum":
            out = v.sum(-1, dtype=dtype)
        elif reduction_type == "prod":
            out = v.prod(-1, dtype=dtype)
        elif reduction_type in ("max", "min"):
            out = v.amax(-1) if reduction_type == "max" else v.amin(-1)
        elif reduction_type in ("argmax", "argmin"):
            out = v.argmax(-1) if reduction_type == "argmax" else v.argmin(-1)
        elif reduction_type == "any":
            out = v.bool().any(-1)
        elif reduction_type == "xor_sum":
            out = v[..., 0].clone()
            for k in range(1, v.shape[-1]):
                out = out ^ v[..., k]
        elif reduction_type == "welford_reduce":
            v = v.to(dtype)  # float32 values may accumulate in float64
            # eager's own Welford pass: no overflow of a sum of large values, eager's NaN/inf
            var, mean = torch.var_mean(v, -1, correction=0)
            m2 = var * v.shape[-1]
            weight = torch.full_like(mean, v.shape[-1])
            return tuple(t.reshape(keep) for t in (mean, m2, weight))
        else:
            raise NotImplementedError(reduction_type)
        return out.to(dtype).reshape(keep)

    def index_expr(self, expr: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(eval_index(sympy.sympify(expr), self.env), device=self.device).to(
            dtype
        )

    def indirect_indexing(self, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
        sym = index_symbol("ind", self._indirect)
        self._indirect += 1
        value = torch.as_tensor(value, device=self.device).long()
        if self.mask is not None:
            value = torch.where(self.mask, value, 0)
        if check and value.numel():
            bound = int(eval_index(sympy.sympify(size), self.env))
            if int(value.min()) < 0 or int(value.max()) >= bound:
                raise IndexError(f"indirect index out of bounds for size {bound}")
        self.env[sym] = value
        return sym

    def masked(self, mask: Any, body: Any, other: Any) -> torch.Tensor:
        mask = torch.as_tensor(mask, device=self.device).bool()
        saved = self.mask
        self.mask = mask if saved is None else (mask & saved)
        try:
            value = torch.as_tensor(body(), device=self.device)
        finally:
            self.mask = saved
        return torch.where(mask, value, torch.tensor(other, dtype=value.dtype, device=self.device))

    def constant(self, value: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(value, dtype=dtype, device=self.device)

    def to_dtype(
        self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device).to(dtype)

    def to_dtype_bitcast(self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device).view(dtype)

    def load_seed(self, name: str, offset: Any) -> torch.Tensor:
        return self.storages[name][int(offset)]

    def _bits(self, seed: Any, offset: Any, salt: int) -> torch.Tensor:
        """32 well-mixed bits of (seed, offset): a splitmix-style hash in int64 arithmetic."""
        mask = (1 << 32) - 1
        z = torch.as_tensor(offset, device=self.device).long() * 2 + salt
        z = (z + torch.as_tensor(seed, device=self.device).long() * 0x9E3779B9) & ((1 << 62) - 1)
        for mul in (0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F):
            z = z ^ (z >> 16)
            z = ((z & mask) * mul) & mask
        return z ^ (z >> 15)

    def rand(self, seed: Any, offset: Any) -> torch.Tensor:
        return (self._bits(seed, offset, 0) >> 8).to(torch.float32) * (1.0 / (1 << 24))

    def randn(self, seed: Any, offset: Any) -> torch.Tensor:
        u1 = ((self._bits(seed, offset, 0) >> 8).double() + 1.0) / (1 << 24)
        u2 = (self._bits(seed, offset, 1) >> 8).double() / (1 << 24)
        return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(6.283185307179586 * u2)).float()

    def randint64(self, seed: Any, offset: Any, low: Any, high: Any) -> torch.Tensor:
        low = torch.as_tensor(low, device=self.device).long()
        high = torch.as_tensor(high, device=self.device).long()
        return low + self._bits(seed, offset, 0) % (high - low)

    def where(self, cond, a, b):
        return torch.where(torch.as_tensor(cond).bool(), a, b)

    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        fn = _torch_fn(name)
        if fn is None:
            raise NotImplementedError(f"ReferenceBackend has no op {name!r}")
        return fn(*[torch.as_tensor(a, device=self.device) for a in args], **kwargs)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The storage ``t`` spans, from its first element, as a 1-D view."""
    if t.numel() == 0:
        return t.new_empty((0,))
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.as_strided((extent,), (1,), t.storage_offset())


@dataclass
class ReferenceKernel:
    """A KernelSpec run by ``TorchOpsHandler``; call with tensors for ``args`` then size ints."""

    name: str
    spec: KernelSpec
    path: str | None = None

    @property
    def source(self) -> str:
        """The kernel as readable text (built on demand: printing is slow)."""
        from .printing import format_kernel

        return format_kernel(self.spec)

    def __call__(self, *args: Any) -> None:
        spec = self.spec
        nargs = len(spec.args)
        tensors, sizes = args[:nargs], args[nargs:]
        subs = {sym: int(v) for sym, v in zip(spec.size_args, sizes)}
        device = tensors[0].device if tensors else torch.device("cpu")
        storages = {name: _flat(t) for name, t in zip(spec.args, tensors)}
        for name in spec.local_buffers:
            b = spec.buffers[name]
            extent = 1 + sum(
                (int(sympy.sympify(s).subs(subs)) - 1) * int(sympy.sympify(st).subs(subs))
                for s, st in zip(b.size, b.stride)
            )
            storages[name] = torch.empty(max(extent, 0), dtype=b.dtype, device=device)
        xr = [int(sympy.sympify(e).subs(subs)) for e in spec.xranges]
        rr = [int(sympy.sympify(e).subs(subs)) for e in spec.rranges]
        if 0 in xr or 0 in rr:  # empty reductions are rejected by the lowering
            return
        ndim = len(xr) + len(rr)
        env: dict[sympy.Symbol, Any] = dict(subs)
        xs = [index_symbol("x", i) for i in range(len(xr))]
        rs = [index_symbol("r", i) for i in range(len(rr))]
        for d, (sym, n) in enumerate(zip(xs + rs, xr + rr)):
            shape = [1] * ndim
            shape[d] = n
            env[sym] = torch.arange(n, device=device).view(shape)
        # abstract to mypy only: the ops are set on DefaultHandler at import (handlers.py)
        handler = TorchOpsHandler(storages, env, ndim, len(xr), device)  # type: ignore[abstract]
        handler.shape = xr + rr
        with set_ops_handler(handler):
            for stage in spec.stages:
                for node in stage.nodes:
                    node.body(xs, rs if stage.kind == "loop" else ())


class ReferenceBackend:
    """A ``Backend`` that needs no compiler: kernels run as vectorized torch code."""

    name = "reference"
    #: loop-ir may hand a kernel one memory as an input and an output (a mutated graph input
    #: written in place, loop-ir's in_place.py): each element is read before it is written
    supports_in_place_inputs = True

    def __init__(
        self, device_type: str = "cpu", capabilities: BackendCapabilities | None = None
    ) -> None:
        self.device_type = device_type
        self.capabilities = capabilities or BackendCapabilities(
            reduction_broadcast_reduction=True, max_reduction_stages=8
        )

    def compile_kernels(self, kernels: Sequence[KernelSpec]) -> list[ReferenceKernel]:
        return [ReferenceKernel(k.name, k) for k in kernels]
