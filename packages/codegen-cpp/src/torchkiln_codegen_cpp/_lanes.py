"""Reductions vectorized across x as blocks of lanes: the innermost x-loop strip-mined.

A kernel whose r-loops walk memory with a non-unit stride while neighbouring x are adjacent
(``sum(0)`` of a contiguous matrix, a bias gradient fused with its activation's backward) is
vectorized across x (``loopnest._vectorize_across_x``). Written as one x-loop holding whole
r-loops under ``omp simd``, that asks g++ for outer-loop vectorization, which it gives up on as
soon as the r-loop stores or calls a libmvec function: GELU's backward fused with its bias
gradient over a 1024 x 256 matrix ran scalar, 4.5 ms (CPU, session 32).

``lane_blocks`` writes the same x body as blocks of ``lanes`` consecutive x: every statement of
the x body outside the r-loops runs in a lane loop of its own, and each r-loop iteration runs a
lane loop over the block, so the loop g++ vectorizes is always the innermost one, over adjacent
memory (0.37 ms for that kernel). A value declared in the x body outside the r-loops (an
accumulator, a value the r-loop reads, a result) becomes an array of one element a lane; values
declared inside an r-loop body stay lane-local scalars.

Only x bodies and r-loop bodies made of plain statements are blocked: ``lane_blocks`` returns
None for anything else. A branch in an r-loop body (a masked load: the pieces of a ``cat``'s
gradient, constant along r for each x) is predicted perfectly in the single loop and becomes a
masked lane loop here: GPT-2's backward of its fused query-key-value split took 1.07 ms blocked,
0.79 ms not.
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
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*(?:\[[^\]]*\])?\s*[-+*/|&^]?=(?!=)\s*\S")


def _statements(line: str) -> list[str] | None:
    """The statements of one line of the x body, or None when it holds a block."""
    if "{" in line or "}" in line or line.lstrip().startswith("#"):
        return None
    parts = [p.strip() for p in line.split(";")]
    if parts[-1]:
        return None  # a statement not ended by ';'
    return [p for p in parts[:-1] if p]


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
    lane = f"{var}_lane"
    block = f"{var}_block"
    count = f"{var}_lanes"
    phases: list[tuple[str, list[str]] | tuple[str, Any]] = []
    plain: list[str] = []
    for item in x_lines:
        if isinstance(item, str):
            plain.append(item)
            continue
        pre, header, body, closing = render_rloop(item)
        if any("{" in ln or "}" in ln for ln in body):
            return None  # a branch per lane: the single loop predicts it, a lane loop masks it
        plain.extend(pre)
        phases.append(("plain", plain))
        phases.append(("rloop", (header, body, closing)))
        plain = []
    phases.append(("plain", plain))
    if not any(kind == "rloop" for kind, _ in phases):
        return None
    declared: dict[str, str] = {}
    parsed: list[tuple[str, Any]] = []
    for kind, content in phases:
        if kind == "rloop":
            parsed.append((kind, content))
            continue
        statements: list[str] = []
        for line in content:
            found = _statements(line)
            if found is None:
                return None
            statements.extend(found)
        for st in statements:
            m = _DECLARATION.match(st)
            if m is not None:
                declared[m.group("name")] = m.group("type").replace("const ", "")
            elif not _ASSIGNMENT.match(st):
                return None  # a declaration of another type, a call: not rewritten safely
        parsed.append((kind, statements))
    if not declared:
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
    ]
    out.extend(f"  {t} {n}[{lanes}];" for n, t in declared.items())
    for kind, content in parsed:
        if kind == "plain":
            if not content:
                continue
            lines = []
            for st in content:
                m = _DECLARATION.match(st)
                if m is not None and m.group("init") is None:
                    continue  # declared above; nothing to run
                if m is not None:
                    lines.append(f"{m.group('name')}[{lane}] = {per_lane(m.group('init'))};")
                else:
                    lines.append(per_lane(st) + ";")
            out.extend(lane_loop(lines, "  "))
        else:
            header, body, closing = content
            depth = "  " * (len(header) + 1)
            out.extend("  " + ln for ln in header)
            out.extend(lane_loop([per_lane(ln) for ln in body], depth))
            out.extend("  " + ln for ln in closing)
    out.append("}")
    return out
