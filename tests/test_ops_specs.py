"""The op-level test table: every lowering in loop-ir's ``LOWERINGS`` registry, as data.

Each ``OpSpec`` names the ATen ops it covers, a function of tensors, the cases it runs on (odd sizes
1, 7 and 257; transposed and sliced inputs; broadcast operands; 0-d operands) and the dtypes it
runs in. ``test_ops_codegen.py`` traces each spec (all its dtypes in one graph) with make_fx and loop-ir's
decompositions, checks that the covered ops really are in the graph and lowered (no fallback), and
runs the graph through codegen-cpp and codegen-triton on fresh inputs against eager.

``test_every_lowering_has_a_spec`` (here) fails when a lowering is registered without a spec.
The table lives in three modules: ``op_specs_base.py`` (``OpSpec``, input makers, ``spec()``),
``op_specs_pointwise.py`` and ``op_specs_structural.py`` (the specs by family); this module gathers
them (``SPECS`` and the names the suites read) and checks the table.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the table's modules sit beside this file; found the same way under --import-mode=importlib
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

import op_specs_pointwise  # noqa: E402, F401  (importing it adds its specs)
from op_specs_base import NOT_ON_CPU, SPECS, TESTED_ELSEWHERE, AnyOf  # noqa: E402
from op_specs_structural import fixed_count_mask  # noqa: E402, F401  (test_special_values reads it)


def covered_ops() -> set[Any]:
    """Every op some spec covers (overloads and packets as written)."""
    return {
        o for s in SPECS for op in s.covers for o in (op.ops if isinstance(op, AnyOf) else (op,))
    }


def covers(op: Any, ops: set[Any]) -> bool:
    """True if ``op`` (an overload or a packet) is among ``ops``, matching packets to overloads."""
    if isinstance(op, AnyOf):
        return any(covers(o, ops) for o in op.ops)
    packet = getattr(op, "overloadpacket", op)
    return op in ops or packet in ops or any(getattr(o, "overloadpacket", None) is op for o in ops)


def test_every_lowering_has_a_spec():
    import torchkiln_loop_ir as L

    ops = covered_ops()
    missing = sorted(
        str(op)
        for op in L.LOWERINGS
        if op not in NOT_ON_CPU and op not in TESTED_ELSEWHERE and not covers(op, ops)
    )
    assert not missing, f"lowerings without an op spec in tests/test_ops_specs.py: {missing}"


def test_spec_names_are_unique():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
