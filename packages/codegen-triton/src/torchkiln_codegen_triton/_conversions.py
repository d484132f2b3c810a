"""Constants, dtype conversions and random numbers of the Triton ops handler (kernel.py's
``TritonOpsHandler``): values below float32 are computed in float32, conversions round to nearest
even like eager (under the interpreter, bfloat16 by the prelude's helpers), random numbers are
Triton's Philox (``tl.rand``/``randn``/``randint``) of a seed and an offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy
import torch

from ._values import LOW_PRECISION as _LOW_PRECISION
from ._values import NONE, TritonValue, full
from .printer import texpr, tl_dtype


class ConversionOps:
    """Mixin: needs ``emit``, ``join``, ``interpret``, ``arg_names``, ``rounded`` (an empty
    set to start) and ``widened`` (an empty dict to start) from the handler."""

    interpret: bool
    arg_names: dict[str, str]
    rounded: set[str]  # values this kernel rounded from float32 (or wider) to 16 bits
    widened: dict[str, TritonValue]  # a float32 value -> the 16-bit value it widens exactly

    if TYPE_CHECKING:

        def emit(
            self, expr: str, dtype: torch.dtype, deps: frozenset[str], post: int | None = None
        ) -> TritonValue: ...

        @staticmethod
        def join(*values: Any) -> tuple[frozenset[str], int | None]: ...

    def as_value(self, x: Any, dtype: torch.dtype) -> TritonValue:
        if isinstance(x, TritonValue):
            return x
        if isinstance(x, bool):
            return self.constant(x, torch.bool)
        return self.constant(x, dtype)

    def constant(self, value: Any, dtype: torch.dtype) -> TritonValue:
        if dtype in _LOW_PRECISION:
            dtype = torch.float32
        return self.emit(full(value, dtype), dtype, NONE)

    def to_dtype(
        self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype | None = None
    ) -> TritonValue:
        x = self.as_value(x, src_dtype or dtype)
        if x.dtype == dtype:
            return x
        narrow = self.widened.get(x.name)
        if narrow is not None and narrow.dtype == dtype:
            return narrow  # narrowing a widened 16-bit value back: the value itself, exactly
        text = self._convert(x.name, x.dtype, dtype)
        if dtype == torch.bool:
            text = f"({x.name} != 0)"
        if x.name in self.rounded and dtype == torch.float32 and not self.interpret:
            # a value this kernel rounded to 16 bits, widened for the next op through an
            # opaque copy of the 16-bit value, else the GPU compiler fuses the rounding away
            # (``_prelude._tk_rounded``)
            text = self._convert(f"_tk_rounded({x.name})", x.dtype, dtype)
        out = self.emit(text, dtype, x.deps, x.post)
        if dtype in _LOW_PRECISION and x.dtype.is_floating_point and x.dtype not in _LOW_PRECISION:
            self.rounded.add(out.name)
        if x.dtype in _LOW_PRECISION and dtype == torch.float32:
            self.widened[out.name] = x
        return out

    def narrowed(self, value: TritonValue, dtype: torch.dtype) -> str:
        """``value`` as ``dtype`` for a store: the 16-bit value it widens when it is one of
        ``dtype`` (a store of ``x.to(bf16).to(f32)`` to a bfloat16 buffer stores ``x.to(bf16)``,
        not a third conversion that ``_tk_rounded``'s opaque copy keeps the compiler from
        folding), else a conversion."""
        if value.dtype == dtype:
            return value.name
        narrow = self.widened.get(value.name)
        if narrow is not None and narrow.dtype == dtype:
            return narrow.name
        return self._convert(value.name, value.dtype, dtype)

    def _convert(self, text: str, src: torch.dtype, dtype: torch.dtype) -> str:
        """``text`` (of ``src``) converted to ``dtype``, rounding to nearest even like eager."""
        if dtype == torch.bfloat16 and self.interpret and src.is_floating_point:
            # the interpreter truncates float32 -> bfloat16 and flushes subnormals; round and
            # narrow the bits ourselves (GPUs round)
            return f"_tk_f32_to_bf16({text}.to(tl.float32))"
        if src == torch.bfloat16 and self.interpret and dtype.is_floating_point:
            # ... and flushes bfloat16 subnormals when widening them
            text = f"_tk_bf16_to_f32({text})"
            return text if dtype == torch.float32 else f"{text}.to({tl_dtype(dtype)})"
        return f"{text}.to({tl_dtype(dtype)})"

    def to_dtype_bitcast(self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype) -> TritonValue:
        x = self.as_value(x, src_dtype)
        src = x.name if x.dtype == src_dtype else f"{x.name}.to({tl_dtype(src_dtype)})"
        return self.emit(f"{src}.to({tl_dtype(dtype)}, bitcast=True)", dtype, x.deps, x.post)

    def load_seed(self, name: str, offset: Any) -> TritonValue:
        return self.emit(
            f"tl.load({self.arg_names[name]} + ({texpr(sympy.sympify(offset))}))", torch.int64, NONE
        )

    def _rng(self, fn: str, seed: Any, offset: Any, dtype: torch.dtype) -> TritonValue:
        seed = self.as_value(seed, torch.int64)
        offset = self.as_value(offset, torch.int64)
        deps, post = self.join(seed, offset)
        return self.emit(f"tl.{fn}({seed.name}, ({offset.name}).to(tl.uint32))", dtype, deps, post)

    def rand(self, seed: Any, offset: Any) -> TritonValue:
        return self._rng("rand", seed, offset, torch.float32)

    def randn(self, seed: Any, offset: Any) -> TritonValue:
        return self._rng("randn", seed, offset, torch.float32)

    def randint64(self, seed: Any, offset: Any, low: Any, high: Any) -> TritonValue:
        bits = self._rng("randint", seed, offset, torch.int32)
        low = self.as_value(low, torch.int64)
        high = self.as_value(high, torch.int64)
        deps, post = self.join(bits, low, high)
        u = f"({bits.name}.to(tl.uint32).to(tl.int64))"
        return self.emit(f"{low.name} + {u} % ({high.name} - {low.name})", torch.int64, deps, post)
