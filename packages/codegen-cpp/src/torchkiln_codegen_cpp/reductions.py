"""The r-loop of one "loop" stage and the reductions it computes.

An ``RLoop`` owns its loop state: the accumulator declarations placed before the loop (``pre``),
the values that do not change along it (``invariant``, rendered before it), the loop body's scope, and the accumulators an ``omp simd reduction(..)`` clause may combine
(``simd_reductions``; None once the loop holds an update that clause cannot express: a NaN-aware
max in a nested scope, an argmax, a running Welford update, an atomic store). ``reduce`` emits one
reduction into it and returns the result values, placed after the loop in the x body ("post"),
where later stages see them. The ops handler (kernel.py) decides which loop is current and caches
results; loopnest.py renders the loop from these attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from ._values import CppValue, Scope
from .errors import CodegenError
from .printer import compute_type, print_index


class RLoop:
    """The r-loop of one "loop" stage, placed in the x body where the stage begins."""

    def __init__(
        self,
        x_scope: Scope,
        rvars: Sequence[sympy.Symbol],
        rranges: Sequence[sympy.Expr],
        fresh: Callable[[str], str],
    ):
        self.x_scope = x_scope  # where results go, after the loop
        self.pre: list[str] = []
        # values that do not change along the loop (an embedding row's index and its bounds
        # check), computed once before it: left inside, the check's possible status write kept
        # GCC from vectorizing the loop (bert's embedding + LayerNorm ran 3.4x slower than eager)
        self.invariant = Scope(x_scope)
        self.body = Scope(self.invariant)
        self.simd_reductions: list[tuple[str, str]] | None = []
        self._rvars = tuple(rvars)
        self._rranges = tuple(rranges)
        self._fresh = fresh  # the kernel's name counter: names stay unique across loops

    def refuse_simd(self) -> None:
        """The loop now holds an update no ``omp simd reduction`` clause expresses."""
        self.simd_reductions = None

    def _simd(self, scope: Scope, clauses: list[tuple[str, str]]) -> None:
        # only an update directly in the loop body can be a clause; one under a ``masked``
        # branch cannot
        if self.simd_reductions is not None and scope is self.body:
            self.simd_reductions.extend(clauses)
        else:
            self.simd_reductions = None

    def _post(self, name: str, dtype: torch.dtype) -> CppValue:
        return CppValue(name, dtype, self.x_scope, self)

    def reduce(self, scope: Scope, dtype: torch.dtype, reduction_type: str, value: CppValue) -> Any:
        """Accumulate ``value`` (computed in ``scope``, the loop body or a scope inside it) with
        ``reduction_type``; the result value(s), after the loop."""
        acc = self._fresh("acc")
        if reduction_type in ("sum", "prod", "xor_sum", "any"):
            return self._associative(scope, dtype, reduction_type, value, acc)
        if reduction_type in ("max", "min"):
            return self._extreme(scope, dtype, reduction_type, value, acc)
        if reduction_type in ("argmax", "argmin"):
            return self._arg_extreme(scope, reduction_type, value, acc)
        if reduction_type == "welford_reduce":
            if value.dtype == torch.float32 and dtype in (torch.float32, torch.float64):
                return self._welford_sums(scope, dtype, value, acc)
            return self._welford_running(scope, dtype, value, acc)
        raise CodegenError(f"unknown reduction type {reduction_type!r}")

    def _associative(
        self, scope: Scope, dtype: torch.dtype, kind: str, value: CppValue, acc: str
    ) -> CppValue:
        init = {"sum": "0", "prod": "1", "xor_sum": "0", "any": "false"}[kind]
        update = {
            "sum": f"{acc} + {value}",
            "prod": f"{acc} * {value}",
            "xor_sum": f"{acc} ^ {value}",
            "any": f"{acc} || static_cast<bool>({value})",
        }[kind]
        self.pre.append(f"{compute_type(dtype)} {acc} = {init};")
        scope.lines.append(f"{acc} = {update};")
        self._simd(scope, [({"sum": "+", "prod": "*", "xor_sum": "^", "any": "||"}[kind], acc)])
        return self._post(acc, dtype)

    def _extreme(
        self, scope: Scope, dtype: torch.dtype, kind: str, value: CppValue, acc: str
    ) -> CppValue:
        ct, is_float = compute_type(dtype), dtype.is_floating_point
        self.pre.append(f"{ct} {acc} = {extreme_init(kind, dtype)};")
        if (
            dtype == torch.bool
            or value.dtype != dtype
            or self.simd_reductions is None
            or scope is not self.body
        ):
            self.refuse_simd()  # a NaN-aware update (in a nested, masked scope, or of a bool)
            scope.lines.append(f"{acc} = tk_{kind}<{ct}>({acc}, {value});")
            return self._post(acc, dtype)
        # Vectorizable: OpenMP's max/min clause over a compare-and-select (which skips NaN), plus
        # an int flag OR-reduced over the lanes that saw a NaN; the result is NaN if any lane
        # did, like torch's amax/amin.
        op = ">" if kind == "max" else "<"
        scope.lines.append(f"{acc} = ({value} {op} {acc}) ? {value} : {acc};")
        self.simd_reductions.append((kind, acc))
        if not is_float:
            return self._post(acc, dtype)
        nan = acc + "_nan"
        self.pre.append(f"int {nan} = 0;")
        scope.lines.append(f"{nan} |= ({value} != {value});")
        self.simd_reductions.append(("|", nan))
        res = self._fresh("tmp")
        self.x_scope.lines.append(
            f"{ct} {res} = {nan} ? std::numeric_limits<{ct}>::quiet_NaN() : {acc};"
        )
        return self._post(res, dtype)

    def _arg_extreme(self, scope: Scope, kind: str, value: CppValue, acc: str) -> CppValue:
        self.refuse_simd()
        best = self._fresh("accv")
        extreme = "max" if kind == "argmax" else "min"
        op = ">" if extreme == "max" else "<"
        self.pre.append(
            f"{compute_type(value.dtype)} {best} = {extreme_init(extreme, value.dtype)};"
        )
        self.pre.append(f"int64_t {acc} = 0;")
        # NaN wins and stays (like torch); ties keep the first index: strict comparison.
        cond = f"!({best} != {best}) && (({value} != {value}) || {value} {op} {best})"
        scope.lines.append(f"if ({cond}) {{ {best} = {value}; {acc} = {self.rindex()}; }}")
        return self._post(acc, torch.int64)

    def _welford_sums(
        self, scope: Scope, dtype: torch.dtype, value: CppValue, acc: str
    ) -> tuple[CppValue, ...]:
        # (mean, m2, weight) of float rows from plain sums of x and x*x in double: three additions
        # an ``omp simd reduction`` vectorizes (a running Welford update is a division per element
        # and scalar: 8x slower than eager's layer_norm). In double, m2 = sum(x*x) - sum(x)**2 / n
        # cancels ~log10((mean/std)**2) of double's 16 digits, far below float32's 7 even for
        # 1000 + randn rows.
        ct = compute_type(dtype)
        s1, s2, w = acc + "_s1", acc + "_s2", acc + "_w"
        self.pre.append(f"double {s1} = 0; double {s2} = 0; double {w} = 0;")
        dv = self._fresh("tmpd")
        scope.lines.append(f"double {dv} = static_cast<double>({value});")
        scope.lines.append(f"{s1} = {s1} + {dv};")
        scope.lines.append(f"{s2} = {s2} + {dv} * {dv};")
        scope.lines.append(f"{w} = {w} + 1.0;")
        self._simd(scope, [("+", s1), ("+", s2), ("+", w)])
        md = acc + "_md"
        self.x_scope.lines.append(f"double {md} = {s1} / {w};")
        self.x_scope.lines.append(f"{ct} {acc}_mean_out = static_cast<{ct}>({md});")
        self.x_scope.lines.append(
            f"{ct} {acc}_m2_out = static_cast<{ct}>(std::max({s2} - {s1} * {md}, 0.0));"
        )
        self.x_scope.lines.append(f"{ct} {acc}_weight_out = static_cast<{ct}>({w});")
        return tuple(self._post(f"{acc}_{p}_out", dtype) for p in ("mean", "m2", "weight"))

    def _welford_running(
        self, scope: Scope, dtype: torch.dtype, value: CppValue, acc: str
    ) -> tuple[CppValue, ...]:
        self.refuse_simd()
        # The running update accumulates in double: in float, the rounding of each
        # ``mean += delta / weight`` step piles up along long rows with a large mean (1000 + randn
        # lost four digits of the variance); double keeps it below float's eps.
        ct = compute_type(dtype)
        mean, m2, weight = acc + "_mean", acc + "_m2", acc + "_weight"
        at = "double" if dtype in (torch.float32, torch.float64) else ct
        self.pre.append(f"{at} {mean} = 0; {at} {m2} = 0; {at} {weight} = 0;")
        d = self._fresh("delta")
        scope.lines.append(
            f"{{ {weight} += 1; {at} {d} = {value} - {mean}; {mean} += {d} / {weight}; "
            f"{m2} += {d} * ({value} - {mean}); }}"
        )
        parts = []
        for part in (mean, m2, weight):
            self.x_scope.lines.append(f"{ct} {part}_out = static_cast<{ct}>({part});")
            parts.append(self._post(part + "_out", dtype))
        return tuple(parts)

    def welford_combine(
        self, scope: Scope, dtype: torch.dtype, parts: Sequence[CppValue]
    ) -> tuple[CppValue, ...]:
        """Combine partial (mean, m2, weight) triples of a split Welford reduction along the loop
        with Chan et al.'s parallel update, in double."""
        self.refuse_simd()
        ct = compute_type(dtype)
        acc = self._fresh("acc")
        mean, m2, w = acc + "_mean", acc + "_m2", acc + "_w"
        self.pre.append(f"double {mean} = 0; double {m2} = 0; double {w} = 0;")
        pm, pm2, pw = parts
        d, nw, r = self._fresh("delta"), self._fresh("nw"), self._fresh("ratio")
        scope.lines.append(
            f"{{ double {nw} = {w} + {pw}; double {d} = {pm} - {mean}; "
            f"double {r} = {nw} == 0 ? 0.0 : {pw} / {nw}; {mean} += {d} * {r}; "
            f"{m2} += {pm2} + {d} * {d} * {w} * {r}; {w} = {nw}; }}"
        )
        out = []
        for name in (mean, m2, w):
            self.x_scope.lines.append(f"{ct} {name}_out = static_cast<{ct}>({name});")
            out.append(self._post(name + "_out", dtype))
        return tuple(out)

    def rindex(self) -> str:
        """The flat index along the reduction ranges (row-major)."""
        flat: sympy.Expr = sympy.Integer(0)
        for var, size in zip(self._rvars, self._rranges):
            flat = flat * size + var
        return print_index(sympy.expand(flat))


def extreme_init(kind: str, dtype: torch.dtype) -> str:
    """The identity of max (``kind="max"``) or min over ``dtype``."""
    ct = compute_type(dtype)
    if dtype == torch.bool:
        return "false" if kind == "max" else "true"
    if dtype.is_floating_point:
        return ("-" if kind == "max" else "") + f"std::numeric_limits<{ct}>::infinity()"
    return f"std::numeric_limits<{ct}>::{'lowest' if kind == 'max' else 'max'}()"
