"""Welford combine in C++: partial (mean, m2, weight) triples of a split Welford reduction,
combined along the r-loop with Chan et al.'s parallel update (in double)."""

from __future__ import annotations

from typing import Any

import torch

from .printer import compute_type


def welford_combine(h: Any, dtype: torch.dtype, value: Any) -> tuple[Any, ...]:
    """Combine partial (mean, m2, weight) triples along the r-loop (Chan et al.), in double.

    ``h`` is the ``CppOpsHandler`` emitting the kernel; results are values placed after the loop.
    """
    from .kernel import CppValue  # the handler's module imports this one

    parts = [h._value(v, dtype) for v in value]
    key = ("welford_combine", tuple(p.expr for p in parts))
    if key in h._reduction_cache:
        return h._reduction_cache[key]
    h._rloop.simd_reductions = None
    pre, body, ct = h._rloop.pre, h._stack[-1], compute_type(dtype)
    acc = h._fresh("acc")
    mean, m2, w = acc + "_mean", acc + "_m2", acc + "_w"
    pre.append(f"double {mean} = 0; double {m2} = 0; double {w} = 0;")
    pm, pm2, pw = parts
    d, nw, r = h._fresh("delta"), h._fresh("nw"), h._fresh("ratio")
    body.lines.append(
        f"{{ double {nw} = {w} + {pw}; double {d} = {pm} - {mean}; "
        f"double {r} = {nw} == 0 ? 0.0 : {pw} / {nw}; {mean} += {d} * {r}; "
        f"{m2} += {pm2} + {d} * {d} * {w} * {r}; {w} = {nw}; }}"
    )
    out = []
    for name in (mean, m2, w):
        h.x_scope.lines.append(f"{ct} {name}_out = static_cast<{ct}>({name});")
        out.append(CppValue(name + "_out", dtype, h.x_scope, h._rloop))
    h._reduction_cache[key] = tuple(out)
    return h._reduction_cache[key]
