"""A combo kernel (loop-ir's ``KernelSpec.combo``, ``combos.py``): independent pointwise kernels
launched as one.

Each member is generated as its own pointwise function (``generate``), taking its program id as
a parameter ``pid`` instead of reading ``tl.program_id(0)``. The combo's function reads the
program id once and calls the member whose programs it falls in, members one after another::

    pid = tl.program_id(0)
    if pid < 3:
        _tk_member0(in_ptr0, out_ptr2, 2500, pid, XBLOCK)
    if (pid >= 3) & (pid < 4):
        _tk_member1(in_ptr1, out_ptr3, 96, pid - 3, XBLOCK)

Triton inlines the members. The dispatch is flat ``if``s: an ``elif`` chain nests each member
in the one before, which Triton compiled more slowly (64 casts for sm_90: 4.7 s nested, 2.8 s
flat). All members run with one XBLOCK (``COMBO_XBLOCK``) and number of warps; the launch's
grid is the members' blocks summed (``launch_spec``), so every member keeps
its own parallelism. Member sizes are static (loop-ir only combines such kernels), so each
member's element count and first program are constants in the text. Members that check their
data (an integer division's divisor, under the interpreter) share the combo's status word.
"""

from __future__ import annotations

import dataclasses

import sympy
from torchkiln_loop_ir.backend import KernelSpec

from ._assemble import arg_names, generate
from .autotune import Config, _numel
from .errors import CodegenError
from .kernel import STATUS_PARAM
from .options import TritonOptions

#: the XBLOCK every member of a combo kernel runs with: the pointwise heuristic's largest
#: (members are small; a larger block only leaves the last program of each emptier)
COMBO_XBLOCK = 1024

#: the combo's launch configuration: fixed, never autotuned (a combo kernel's members are
#: launch-bound; timing configs would rerun the members)
COMBO_CONFIG = Config(COMBO_XBLOCK, 1, 4, False, reason="combo kernel")


def member_numel(spec: KernelSpec) -> int:
    """A member's element count (static: loop-ir combines only kernels of static sizes)."""
    numel = _numel(spec.xranges)
    if numel is None:
        raise CodegenError(f"combo kernel member {spec.name} of symbolic size")
    return numel


def launch_spec(spec: KernelSpec) -> KernelSpec:
    """``spec`` (a combo) with the x range its launch covers: each member's elements rounded up
    to whole blocks of ``COMBO_XBLOCK``, summed (``Config.programs`` of it is the grid)."""
    blocks = sum(-(-member_numel(m) // COMBO_XBLOCK) for m in spec.combo)
    return dataclasses.replace(spec, xranges=(sympy.Integer(blocks * COMBO_XBLOCK),))


def combo_source(spec: KernelSpec, options: TritonOptions, *, interpret: bool, name: str) -> str:
    """The ``@triton.jit`` functions of combo kernel ``spec``: its own, named ``name``, then
    each member's (no module header; ``module_source`` adds the first decorator)."""
    names = arg_names(spec)
    status = False  # a member checks its data (an integer divisor under the interpreter)
    members: list[str] = []
    dispatch: list[str] = []
    start = 0
    for i, member in enumerate(spec.combo):
        if member.is_reduction or member.size_args or member.row_programs or member.combo:
            raise CodegenError(f"combo kernel {spec.name}: member {member.name} is not pointwise")
        fn = f"_tk_member{i}"
        text = generate(
            member,
            looped=False,
            options=options,
            interpret=interpret,
            fn_name=fn,
            xblock=COMBO_XBLOCK,
        ).source
        head = "xnumel, XBLOCK: tl.constexpr):"
        checks = f"{STATUS_PARAM}, {head}" in text  # it reports into the call's status word
        if text.count("tl.program_id(0)") != 1 or "tl.program_id(1)" in text or head not in text:
            raise CodegenError(
                f"combo kernel {spec.name}: member {member.name} is not a plain pointwise kernel"
            )
        members.append(
            text.replace("tl.program_id(0)", "pid").replace(
                head, "xnumel, pid, XBLOCK: tl.constexpr):"
            )
        )
        numel = member_numel(member)
        blocks = -(-numel // COMBO_XBLOCK)
        args = ", ".join([*(names[a] for a in member.args), *([STATUS_PARAM] if checks else [])])
        status = status or checks
        # flat ifs, not an elif chain: Triton nests each elif in the one before, and the
        # compile time grew faster than the members (sm_90, 64 casts: 4.7 s nested)
        bounds = (
            f"pid < {start + blocks}"
            if start == 0
            else f"(pid >= {start}) & (pid < {start + blocks})"
        )
        dispatch.append(f"    if {bounds}:")
        offset = f"pid - {start}" if start else "pid"
        dispatch.append(f"        {fn}({args}, {numel}, {offset}, XBLOCK)")
        start += blocks
    # the status word follows the tensors (TritonCompiledKernel passes it there), shared by
    # the members that check
    params = [
        *names.values(),
        *([STATUS_PARAM] if status else []),
        "xnumel",
        "XBLOCK: tl.constexpr",
    ]
    own = "\n".join(
        [
            f"def {name}({', '.join(params)}):",
            f"    # combo kernel: {len(spec.combo)} independent pointwise kernels, "
            f"{start} programs of {COMBO_XBLOCK}",
            "    pid = tl.program_id(0)",
            *dispatch,
        ]
    )
    return "\n\n\n@triton.jit\n".join([own + "\n", *members])
