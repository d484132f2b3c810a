"""Reductions vectorized across x as blocks of lanes: the innermost x-loop strip-mined.

A kernel whose r-loops walk memory with a non-unit stride while neighbouring x are adjacent
(``sum(0)`` of a contiguous matrix, a bias gradient fused with its activation's backward) is
vectorized across x (``loopnest._vectorize_across_x``). Written as one x-loop holding whole
r-loops under ``omp simd``, that asks g++ for outer-loop vectorization, which it gives up on as
soon as the r-loop stores or calls a libmvec function: GELU's backward fused with its bias
gradient over a 1024 x 256 matrix ran scalar (CPU, session 32; figures below).

``lane_blocks`` writes the same x body as blocks of ``lanes`` consecutive x: every statement of
the x body outside the r-loops runs in a lane loop of its own, and each r-loop iteration runs a
lane loop over the block, so the loop g++ vectorizes is always the innermost one, over adjacent
memory: 4.4-5.5 -> 0.41-0.45 ms for that kernel (``benchmarks/cpu_microbench.py``), and
BERT's two such kernels in its small config's backward at batch 32 about 2.9 -> 0.6 ms each
(``benchmarks/cpu_kernel_times.py --model bert [--x-lanes 0]``). A value declared in the x
body outside the r-loops (an accumulator, a value the r-loop reads, a result) becomes an array
of one element a lane; values declared inside an r-loop body stay lane-local scalars.

Only x bodies and r-loop bodies made of plain statements are blocked: ``lane_blocks`` returns
None for anything else. A branch in an r-loop body (a masked load: the pieces of a ``cat``'s
gradient, constant along r for each x) is predicted perfectly in the single loop and becomes a
masked lane loop here: GPT-2's backward of its fused query-key-value split took 1.07 ms blocked
against 0.79 ms not (an earlier build that blocked it; ``cpu_kernel_times.py --model gpt2``
shows the one loop kept).
"""

from __future__ import annotations

import re
from typing import Any

#: a declaration statement of the x body: ``TYPE NAME = EXPR`` or ``TYPE NAME``
_DECLARATION = re.compile(
    r"^(?P<type>(?:const\s+)?(?:float|double|bool|int|int8_t|int16_t|int32_t|int64_t|uint8_t"
    r"|uint16_t|uint32_t|uint64_t))\s+(?P<name>[A-Za-z_]\w*)\s*(?:=\s*(?P<init>.*))?$"
)


#: any other statement the x body may hold: an assignment to a name or an element
_ASSIGNMENT = re.compile(
    r"^(?P<target>[A-Za-z_]\w*(?:\[[^\]]*\])?)\s*(?P<op>[-+*/|&^]?=)(?!=)\s*(?P<value>\S.*)$"
)


def _assignments(lines: list[str], declared: dict[str, str]) -> list[tuple[str, str]] | None:
    """The x body's plain ``lines`` as (target, value) assignments, each declaration's type
    recorded in ``declared`` (a declaration without a value assigns nothing); None when a line
    holds a block, a pragma, an unended statement, or a statement that is neither a declaration
    of a known type nor an assignment (a call: not rewritten per lane safely)."""
    out: list[tuple[str, str]] = []
    for line in lines:
        if "{" in line or "}" in line or line.lstrip().startswith("#"):
            return None
        parts = [p.strip() for p in line.split(";")]
        if parts[-1]:
            return None  # a statement not ended by ';'
        for st in filter(None, parts[:-1]):
            m = _DECLARATION.match(st)
            if m is not None:
                declared[m.group("name")] = m.group("type").replace("const ", "")
                if m.group("init") is not None:
                    out.append((m.group("name"), "= " + m.group("init")))
                continue
            m = _ASSIGNMENT.match(st)
            if m is None:
                return None
            out.append((m.group("target"), m.group("op") + " " + m.group("value")))
    return out


def lane_blocks(
    x_lines: list[Any],
    var: str,
    size: str,
    lanes: int,
    render_rloop: Any,
) -> list[str] | None:
    """The innermost x-loop over ``var`` < ``size`` as blocks of ``lanes`` (see the module
    docstring), or None. ``x_lines`` is the x scope's lines (strings and r-loops);
    ``render_rloop(item)`` gives an r-loop's ``(pre lines, loop header lines, body lines,
    closing lines)``."""
    lane, block, count = f"{var}_lane", f"{var}_block", f"{var}_lanes"
    declared: dict[str, str] = {}  # every value of the x body outside the r-loops, its type
    # the x body in order: ("plain", assignments) and ("rloop", (header, body, closing))
    phases: list[tuple[str, Any]] = []
    plain: list[str] = []
    for item in [*x_lines, None]:
        if isinstance(item, str):
            plain.append(item)
            continue
        parts = render_rloop(item) if item is not None else ([], None, [], [])
        pre, header, body, closing = parts
        if any("{" in ln or "}" in ln for ln in body):
            return None  # a branch per lane: the single loop predicts it, a lane loop masks it
        assignments = _assignments([*plain, *pre], declared)
        if assignments is None:
            return None
        phases.append(("plain", assignments))
        if header is not None:
            phases.append(("rloop", (header, body, closing)))
        plain = []
    if not declared or not any(kind == "rloop" for kind, _ in phases):
        return None
    names = re.compile(r"\b(" + "|".join(map(re.escape, sorted(declared))) + r")\b(?!\s*\[)")

    def per_lane(text: str) -> str:
        return names.sub(lambda m: f"{m.group(1)}[{lane}]", text)

    def lane_loop(lines: list[str], indent: str) -> list[str]:
        return [
            f"{indent}#pragma omp simd",
            f"{indent}for (int64_t {lane} = 0; {lane} < {count}; {lane}++) {{",
            f"{indent}  const int64_t {var} = {block} + {lane};",
            *(f"{indent}  {ln}" for ln in lines),
            f"{indent}}}",
        ]

    out = [
        f"for (int64_t {block} = 0; {block} < {size}; {block} += {lanes}) {{",
        f"  const int64_t {count} = std::min<int64_t>({lanes}, ({size}) - {block});",
        *(f"  {t} {n}[{lanes}];" for n, t in declared.items()),
    ]
    for kind, content in phases:
        if kind == "plain":
            if content:
                lines = [f"{per_lane(target)} {per_lane(value)};" for target, value in content]
                out.extend(lane_loop(lines, "  "))
            continue
        header, body, closing = content
        out.extend("  " + ln for ln in header)
        out.extend(lane_loop([per_lane(ln) for ln in body], "  " * (len(header) + 1)))
        out.extend("  " + ln for ln in closing)
    out.append("}")
    return out
