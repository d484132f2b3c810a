"""Matrix products computed inside the kernel of their pointwise consumers (``KernelSpec.template``).

A linear layer whose activation cuBLASLt has no epilogue for (BERT's, ViT's and DistilBERT's
exact GELU; a SiLU; a residual add) reaches the schedule as an extern ``addmm`` (or ``mm``)
writing the (tokens, features) product, then a pointwise kernel that reads it back and writes
the activation. When the code generator can compute the product itself
(``BackendCapabilities.matmul_templates``), the two become one kernel: the product's tiles are
computed in registers and the consumer's bodies run on them (its epilogue), so the product is
never written nor read back. ``fuse_matmul_epilogues`` is a pass over the steps, after kernels
are formed and before buffers are planned.

A pair is fused when all of these hold (else the reason is logged):

- the extern is ``aten.mm`` or ``aten.addmm`` (``beta`` and ``alpha`` 1; the bias any strided
  tensor broadcasting to the product), of static sizes, whose result is contiguous;
- exactly one later step reads the product, a pointwise kernel (not a reduction, a
  mixed-order or combo kernel), directly or through contiguous views of it at offset 0 (views
  nothing else reads); the product is not a graph output;
- every load of the product in that kernel is at the kernel's row-major flat index over M x N
  elements: element (i, j) of the product at iteration i * N + j;
- the operands are not graph inputs written in place (the fused kernel reads them later than
  the extern did).

Which pairs are fused is the ``mode`` (``LoopIROptions.matmul_templates``): ``"auto"`` (the
default) asks the backend's ``choose_matmul_template`` (a code generator's timing of its tiles
against the extern and the unfused kernel, or its prediction of both; without one nothing is
fused), ``"always"`` fuses
every pair with the code generator's default tile (tests run it under Triton's interpreter),
``"never"`` none. Every candidate's decision is a line of the log (``CompiledGraph.linear_log``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import sympy
import torch

from .backend import BufferRef, BufferSpec, ExternCall, KernelSpec, MatmulTemplate, View
from .in_place import _replay, _same_index
from .indexing import index_symbol
from .ir import contiguous_strides, product
from .memory import step_uses

aten = torch.ops.aten
MODES = ("auto", "always", "never")
#: the products a template computes
PRODUCTS = (aten.mm.default, aten.addmm.default)

#: ``choose([(template kernel, extern, consumer kernel), ...], buffers)``: for each pair, the
#: tile of its fused kernel, or None to keep the pair apart, and a line for the log
Chooser = Callable[
    [Sequence[tuple[KernelSpec, ExternCall, KernelSpec]], Mapping[str, BufferSpec]],
    Sequence[tuple[tuple[tuple[str, int], ...] | None, str]],
]


def _static(values: Sequence[Any]) -> tuple[int, ...] | None:
    out = []
    for v in values:
        v = sympy.sympify(v)
        if not v.is_Integer:
            return None
        out.append(int(v))
    return tuple(out)


def _label(m: int, k: int, n: int, bias: bool) -> str:
    return f"{m}x{k}x{n}{' + bias' if bias else ''}"


def _operands(step: ExternCall, buffers: Mapping[str, BufferSpec]) -> tuple[Any, str]:
    """(a, b, bias, m, k, n) of a product the template computes, or (None, why not)."""
    if step.kind != "extern" or step.op not in PRODUCTS or len(step.outputs) != 1:
        return None, "not a product"
    args = list(step.args)
    kwargs = dict(step.kwargs)
    bias = None
    if step.op == aten.addmm.default:
        beta = kwargs.pop("beta", args[3] if len(args) > 3 else 1)
        alpha = kwargs.pop("alpha", args[4] if len(args) > 4 else 1)
        if beta != 1 or alpha != 1:
            return None, "addmm with beta or alpha other than 1"
        bias, args = args[0], args[1:3]
    if kwargs or len(args) != 2:
        return None, "arguments the template does not take"
    refs = [*args, *(() if bias is None else (bias,))]
    if not all(isinstance(r, BufferRef) and r.name in buffers for r in refs):
        return None, "an operand that is not a buffer"
    a, b = (buffers[r.name] for r in args)
    out = buffers[step.outputs[0]]
    sizes = _static((*a.size, *b.size, *out.size, *out.stride, out.offset))
    if sizes is None or len(a.size) != 2 or len(b.size) != 2 or len(out.size) != 2:
        return None, "symbolic sizes"
    m, k, _, n = (*a.size, *b.size)
    m, k, n = int(m), int(k), int(n)
    if tuple(int(s) for s in out.stride) != tuple(contiguous_strides((m, n))) or out.offset != 0:
        return None, f"{_label(m, k, n, bias is not None)}: a result that is not contiguous"
    if a.dtype != out.dtype or b.dtype != out.dtype or out.dtype not in _DTYPES:
        return None, f"{_label(m, k, n, bias is not None)}: dtype {out.dtype}"
    for spec in (a, b) if bias is None else (a, b, buffers[bias.name]):
        if _static((*spec.stride, spec.offset)) is None or _static(spec.size) is None:
            return None, "symbolic strides"
    if bias is not None:
        bspec = buffers[bias.name]
        if bspec.dtype != out.dtype or len(bspec.size) > 2:
            return None, f"{_label(m, k, n, True)}: a bias of another dtype or rank"
        padded = (1,) * (2 - len(bspec.size)) + tuple(int(s) for s in bspec.size)
        if any(s not in (1, full) for s, full in zip(padded, (m, n))):
            return None, f"{_label(m, k, n, True)}: a bias that does not broadcast"
    return (args[0].name, args[1].name, None if bias is None else bias.name, m, k, n), ""


_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _flat_index(ranges: Sequence[sympy.Expr]) -> sympy.Expr:
    """The row-major flat index of a kernel's x variables (ranges of size 1 have none)."""
    strides = contiguous_strides(ranges)
    return sum(
        (index_symbol("x", i) * st for i, (r, st) in enumerate(zip(ranges, strides)) if r != 1),
        sympy.Integer(0),
    )


def _aliases(steps: Sequence[Any], name: str, buffers: Mapping[str, BufferSpec]) -> set[str]:
    """Views of ``name`` (a product) at its own elements: contiguous, offset 0, the same
    element count (a ``view`` back to the input's leading dims); other views are readers, not
    aliases."""
    spec = buffers[name]
    numel = product(spec.size)
    names = {name}
    for step in steps:
        if isinstance(step, View) and step.base in names:
            contiguous = tuple(step.stride) == tuple(contiguous_strides(tuple(step.size)))
            if contiguous and step.offset == 0 and product(step.size) == numel:
                names.add(step.name)
    return names


def _consumer(
    steps: Sequence[Any], at: int, names: set[str], outputs: Collection[str]
) -> tuple[int, str]:
    """The one step after ``at`` that reads the product (any of ``names``), or (-1, why)."""
    if names & set(outputs):
        return -1, "the product is a graph output"
    readers = []
    for i in range(at + 1, len(steps)):
        step = steps[i]
        if isinstance(step, View):
            if step.base in names and step.name not in names:
                return -1, "a view of the product at other elements"
            continue
        if step_uses(step) & names:
            readers.append(i)
    if len(readers) != 1:
        return -1, f"{len(readers)} steps read the product"
    step = steps[readers[0]]
    if not isinstance(step, KernelSpec):
        return -1, "what reads the product is not a generated kernel"
    if step.is_reduction or step.row_programs or step.combo or step.template is not None:
        return -1, "what reads the product is not a pointwise kernel"
    if set(step.outputs) & names:
        return -1, "the kernel writes the product"
    return readers[0], ""


def _reads_at_flat_index(kernel: KernelSpec, names: set[str], m: int, n: int) -> str:
    """'' when every load of the product in ``kernel`` is at its flat index, else why not."""
    if _static(kernel.xranges) is None or int(product(kernel.xranges)) != m * n:
        return f"the kernel's {len(kernel.xranges)} ranges are not the product's elements"
    rec = _replay(kernel)
    if rec is None:
        return "the kernel's bodies could not be replayed"
    flat = _flat_index(kernel.xranges)
    loads = [a for a in rec.seen if a[1] in names]
    if not loads:
        return "the kernel does not load the product"
    if any(a[0] != "load" or not _same_index(a[2], flat) for a in loads):
        return "the kernel reads the product at other elements"
    return ""


def fuse_matmul_epilogues(
    steps: Sequence[Any],
    buffers: Mapping[str, BufferSpec],
    outputs: Collection[str],
    mode: str,
    choose: Chooser | None = None,
    protected: Collection[str] = (),
) -> tuple[list[Any], tuple[str, ...]]:
    """``steps`` with each fusable (product, pointwise consumer) pair made one template kernel
    (see the module docstring), and a log line per candidate. ``protected``: buffers written in
    place later (mutated graph inputs), which no template reads. The pairs are found first and
    ``choose`` gets them all in one call (a code generator compiles every candidate together)."""
    if mode not in MODES:
        raise ValueError(f"matmul_templates must be one of {MODES}, got {mode!r}")
    steps = list(steps)
    if mode == "never":
        return steps, ()
    log: list[str] = []
    pairs = _pairs(steps, buffers, outputs, protected, log)
    if mode == "auto" and choose is None:
        log += [
            f"{label} kept as an extern: the code generator does not choose templates"
            for *_, label in pairs
        ]
        return steps, tuple(log)
    if mode == "auto":
        answers = choose([(fused, extern, kernel) for fused, extern, kernel, _ in pairs], buffers)
    else:
        answers = [((), "always")] * len(pairs)
    fused_at: dict[int, KernelSpec] = {}
    dropped: set[int] = set()
    for (fused, extern, kernel, label), (tile, why) in zip(pairs, answers):
        if tile is None:
            log.append(f"{label} kept as an extern: {why}")
            continue
        template = fused.template
        assert template is not None
        fused_at[id(kernel)] = replace(fused, template=replace(template, tile=tile))
        dropped.add(id(extern))
        dropped |= {id(s) for s in steps if isinstance(s, View) and s.name in template.aliases}
        log.append(f"{label} computed in kernel {kernel.name} with its epilogue: {why}")
    steps = [fused_at.get(id(s), s) for s in steps if id(s) not in dropped]
    return steps, tuple(log)


def _pairs(
    steps: Sequence[Any],
    buffers: Mapping[str, BufferSpec],
    outputs: Collection[str],
    protected: Collection[str],
    log: list[str],
) -> list[tuple[KernelSpec, ExternCall, KernelSpec, str]]:
    """Each fusable (fused kernel, extern, consumer kernel, label), a consumer taken by its
    first product only (Llama's SiLU times the other product reads two); a log line for each
    product that is not."""
    base_of = {s.name: s.base for s in steps if isinstance(s, View)}

    def root(name: str) -> str:
        while name in base_of:
            name = base_of[name]
        return name

    pairs = []
    taken: set[int] = set()
    for i, step in enumerate(steps):
        if not isinstance(step, ExternCall) or step.op not in PRODUCTS:
            continue
        found, why = _operands(step, buffers)
        if found is None:
            log.append(f"product kept as {step.op}: {why}")
            continue
        a, b, bias, m, k, n = found
        label = _label(m, k, n, bias is not None)
        if any(root(x) in protected for x in (a, b, bias) if x is not None):
            log.append(f"{label} kept as an extern: an operand is written in place later")
            continue
        product = step.outputs[0]
        names = _aliases(steps, product, buffers)
        at, why = _consumer(steps, i, names, outputs)
        if at >= 0 and id(steps[at]) in taken:
            at, why = -1, "its kernel computes another product already"
        if at < 0:
            log.append(f"{label} kept as an extern: {why}")
            continue
        kernel = steps[at]
        why = _reads_at_flat_index(kernel, names, m, n)
        if why:
            log.append(f"{label} kept as an extern: {why}")
            continue
        template = MatmulTemplate(product, a, b, bias, m, n, k, tuple(sorted(names - {product})))
        taken.add(id(kernel))
        pairs.append((_fused(kernel, template, buffers), step, kernel, label))
    return pairs


def _fused(kernel: KernelSpec, template: MatmulTemplate, buffers: Mapping[str, BufferSpec]):
    """``kernel`` computing ``template``'s product itself: its operands first among its inputs,
    the product's names no longer read from memory."""
    rest = tuple(x for x in kernel.inputs if x not in template.names)
    # one argument a buffer: ``x @ x`` reads one buffer as both operands
    operands = tuple(dict.fromkeys(x for x in template.operands if x not in rest))
    merged = dict(kernel.buffers)
    for name in (*template.operands, *template.names):
        merged[name] = buffers[name]
    return replace(kernel, inputs=operands + rest, buffers=merged, template=template)


__all__ = ["MODES", "fuse_matmul_epilogues"]
