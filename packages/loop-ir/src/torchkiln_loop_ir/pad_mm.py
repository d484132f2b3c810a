"""Matrix multiplies padded to aligned sizes for the GPU's tensor-core kernels.

cuBLAS picks its fast (Hopper ``nvjet``/``sm90``) kernels only when every matrix's leading
dimension is a multiple of 16 bytes. A language model's vocabulary rarely is: GPT-2's output
projection (8192 x 768 @ 768 x 50257, bfloat16) ran in an old ``align1`` CUTLASS kernel for
6.6 ms on the H200, where the same product at width 50264 takes 0.87 ms; BERT's (vocabulary
30522, ``align2``) 1.6 ms against 0.55 ms; and a training step runs three such products (the
forward and both gradients).

``pad_matmuls(gm)`` is a pass over the ATen graph before lowering: each ``mm``/``addmm``/``bmm``
of static size whose M, K or N is not a multiple of 16 bytes' worth of elements, large enough
for the padding copies to be cheap beside the product, is rewritten as the product of
zero-padded operands (``constant_pad_nd``: the zeros add nothing along K, and the rows or columns
added along M and N are sliced away), followed by a slice of the result. The slice is a view:
what reads it reads the padded buffer in place. A graph output keeps the strides it was traced
with (a copy, since the caller, or the backward reading a saved activation, indexes it with
those), except the results an inference graph hands the user as they are (contract C2's
``meta["free_output_strides"]``): GPT-2's logits come back as a view of the padded product, as
torch.compile's do (the copy back cost 1 ms of the 2 ms product, and doubled the peak memory of
inference). The pads are pointwise code that fuses with the producer of a padded operand.

With ``output_only`` (``LoopIROptions.pad_matmul_outputs_only``), a product whose M and K are
aligned and whose second operand's rows are already 16-byte apart (a transposed weight: GPT-2's
and BERT's vocabulary heads) pads nothing: it is ``torchkiln::mm_padded_n``, the product written
into an (M, N') buffer through its (M, N) view, so only the output's leading dimension is
aligned, the thing cuBLAS needs of it. That saves the padded copy of the weight made on every
call (GPT-2: 77 MB in bfloat16, the whole of its peak memory above eager's). One product over
N = 50257 does not get cuBLAS's fast kernel (session 18: GPT-2 4.6 -> 10.3 ms on the H200), so
it runs as two: the aligned columns (50256), and the rest written into its view (session 38,
H100, ``benchmarks/gpu_mm_layouts.py``: GPT-2's head 0.99 ms against 1.00 with the padded
weight, BERT's 0.61 against 0.63, DistilBERT's 1.22 against 1.16; the rest as a padded
product copied into place was slower each time in that call, 1.00, 0.62 and 1.26, and was
dropped, so no command here reproduces those three). The
default ("auto") does so for ``mm`` only: for an ``addmm`` ATen first copies the bias into the
strided output, which made BERT's and DistilBERT's inference 9% and 19% slower.

Float32 products are padded only where they run on tensor cores
(``torch.backends.cuda.matmul.allow_tf32`` when the graph is compiled). Without TF32 cuBLAS runs
them on the SIMT cores, which do not care for the alignment: BERT's head (8192 x 768 @ 768 x
30522) took 7.53 ms unpadded and 7.53 padded on an H100, GPT-2's 12.37 and 12.36, and the padded
copy of the weight on every call only costs its time and memory (``benchmarks/gpu_mm_layouts.py
--dtype float32``; with ``--tf32`` the padding takes GPT-2's from 4.84 to 1.80 ms). The flag is
read at compile time and not guarded: a graph compiled under one setting computes correctly
under the other (aten reads the flag when it runs), only its padding may no longer pay.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from .mkldnn import (
    _LIB,
    _STORAGE_OPS,
    _fake_meta,
    _keep_output_layouts,
    _meta_mode,
    _output_values,
    _propagate_meta,
    _static_inputs,
    _val,
    copied_graph,
)

aten = torch.ops.aten

#: bytes a leading dimension must be a multiple of for cuBLAS's aligned kernels
ALIGN_BYTES = 16
#: products smaller than this (M*N*K) are left alone: their padding copies would not pay
MIN_WORK = 1 << 24
#: the padded product may cost at most this much more work than the original
MAX_GROWTH = 1.10

_MATMULS = (aten.mm.default, aten.addmm.default, aten.bmm.default)

_LIB.define("mm_padded_n(Tensor? bias, Tensor a, Tensor b, int padded_n) -> Tensor")


def _mm_padded_n(bias, a, b, padded_n):
    """``a @ b`` (plus ``bias``, as ``addmm``) in the first N columns of a new (M, padded_n)
    tensor, which it returns; the other columns are not written (the graph slices them away).

    The product runs as two: the columns up to the last multiple of 16 bytes' worth (50256 of
    GPT-2's 50257), whose sizes and leading dimensions are all aligned, so cuBLAS picks its
    fast kernels for them, and the few columns left (at most 7 in 16 bits). Each writes its
    part of the output in place (``out=`` a view whose leading dimension is padded_n: cuBLAS
    takes the stride as it is)."""
    out = torch.empty((a.shape[0], padded_n), dtype=a.dtype, device=a.device)
    n = b.shape[1]
    head = n - n % (ALIGN_BYTES // a.element_size())
    bounds = (0, head, n) if 0 < head < n else (0, n)
    for lo, hi in zip(bounds, bounds[1:]):
        view, part = out[:, lo:hi], b[:, lo:hi]
        if bias is None:
            torch.mm(a, part, out=view)
        else:
            own = bias[..., lo:hi] if bias.dim() and bias.shape[-1] == n and n > 1 else bias
            torch.addmm(own, a, part, out=view)
    return out


def _mm_padded_n_fake(bias, a, b, padded_n):
    return a.new_empty((a.shape[0], padded_n))


_LIB.impl("mm_padded_n", _mm_padded_n, "CompositeExplicitAutograd")
torch.library.register_fake("torchkiln::mm_padded_n", _mm_padded_n_fake, lib=_LIB)
MM_PADDED_N = torch.ops.torchkiln.mm_padded_n.default
#: the wrapper calls this operator's function directly (no dispatcher round trip)
DIRECT_CALLS = {MM_PADDED_N: _mm_padded_n}


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


def _plan(
    node: fx.Node, float32: bool = True
) -> tuple[tuple[int, int, int], tuple[int, int, int]] | str:
    """((M, K, N), (M', K', N')) padded sizes for ``node``, or why it is left alone. ``float32``:
    whether float32 products are padded (they run on tensor cores)."""
    a, b = (node.args[1], node.args[2]) if node.target is aten.addmm.default else node.args[:2]
    va, vb = _val(a), _val(b)
    if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor):
        return "operands without a tensor value"
    if va.dtype not in (torch.float16, torch.bfloat16, torch.float32) or vb.dtype != va.dtype:
        return f"dtype {va.dtype}"
    if va.dtype == torch.float32 and not float32:
        return "float32 without TF32: the SIMT product gains nothing from alignment"
    if not all(isinstance(s, int) for s in (*va.shape, *vb.shape)):
        return "symbolic sizes"
    m, k = va.shape[-2:]
    n = vb.shape[-1]
    align = ALIGN_BYTES // va.element_size()
    sizes = (m, k, n)
    padded = tuple(_up(s, align) for s in sizes)
    if padded == sizes:
        return "already aligned"
    if m * k * n < MIN_WORK:
        return f"too small to pay ({m}x{k}x{n})"
    if padded[0] * padded[1] * padded[2] > MAX_GROWTH * m * k * n:
        return f"padding grows the work more than {MAX_GROWTH:.2f}x ({m}x{k}x{n})"
    if node.target is aten.addmm.default and isinstance(node.args[0], fx.Node):
        bias = _val(node.args[0])
        if not isinstance(bias, torch.Tensor) or bias.dim() > 2:
            return "a bias of unexpected rank"
    return sizes, padded  # type: ignore[return-value]


_TRANSPOSES = {aten.permute.default, aten.t.default, aten.transpose.int}


def _perm(node: fx.Node) -> list[int] | None:
    """The dimension order of a transposing view node (``x.dim[perm[i]]`` is dim ``i``)."""
    rank = _val(node).dim()
    if node.target is aten.permute.default:
        return [d % rank for d in node.args[1]]
    if node.target is aten.t.default:
        return [1, 0] if rank == 2 else list(range(rank))
    a, b = (d % rank for d in node.args[1:3])
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return perm


def _pad(graph: fx.Graph, before: fx.Node, x: Any, pads: list[int], memo: dict) -> Any:
    """``x`` zero-padded by ``pads`` (torch's last-dim-first pairs), or ``x`` if no pad.

    A transposed view is padded through its base, then transposed again: the padded copy is
    then written in the base's own order (a transposing copy reads with a large stride, 3.1 ms
    for GPT-2's logits gradient where a straight one takes 0.6), and two products that read
    the same tensor, one of them transposed (the two gradients of a linear layer), share one
    padded copy (``memo``: (node, pads) -> padded node)."""
    if not isinstance(x, fx.Node) or not any(pads):
        return x
    while pads[-2:] == [0, 0]:  # the same padding spelt with trailing zero pairs
        pads = pads[:-2]
    key = (x, tuple(pads))
    if key in memo:
        return memo[key]
    if x.target in _TRANSPOSES and isinstance(x.args[0], fx.Node):
        perm = _perm(x)
        rank = len(perm)
        per_dim = [0] * rank
        for i in range(len(pads) // 2):
            per_dim[rank - 1 - i] = pads[2 * i + 1]
        base_dim = [0] * rank
        for i, d in enumerate(perm):
            base_dim[d] = per_dim[i]
        depth = max((rank - d for d in range(rank) if base_dim[d]), default=0)
        base_pads = [v for d in range(rank - 1, rank - 1 - depth, -1) for v in (0, base_dim[d])]
        padded = _pad(graph, before, x.args[0], base_pads, memo)
        with graph.inserting_before(before):
            node = graph.call_function(aten.permute.default, (padded, perm))
    else:
        with graph.inserting_before(before):
            node = graph.call_function(aten.constant_pad_nd.default, (x, pads, 0.0))
    _fake_meta(node)
    memo[key] = node
    return node


def _rewrite(
    graph: fx.Graph,
    node: fx.Node,
    sizes: tuple[int, int, int],
    padded: tuple[int, int, int],
    memo: dict,
) -> None:
    (m, k, n), (pm, pk, pn) = sizes, padded
    dm, dk, dn = pm - m, pk - k, pn - n
    if node.target is aten.addmm.default:
        bias, a, b = node.args[:3]
        vb = _val(bias) if isinstance(bias, fx.Node) else None
        if isinstance(vb, torch.Tensor) and vb.dim() == 1:
            bias = _pad(graph, node, bias, [0, dn if vb.shape[0] == n else 0], memo)
        elif isinstance(vb, torch.Tensor) and vb.dim() == 2:
            bias = _pad(
                graph,
                node,
                bias,
                [0, dn if vb.shape[1] == n else 0, 0, dm if vb.shape[0] == m else 0],
                memo,
            )
        args: tuple[Any, ...] = (
            bias,
            _pad(graph, node, a, [0, dk, 0, dm], memo),
            _pad(graph, node, b, [0, dn, 0, dk], memo),
            *node.args[3:],
        )
    else:
        a, b = node.args[:2]
        args = (
            _pad(graph, node, a, [0, dk, 0, dm], memo),
            _pad(graph, node, b, [0, dn, 0, dk], memo),
        )
    with graph.inserting_before(node):
        product = graph.call_function(node.target, args, dict(node.kwargs))
    _fake_meta(product)
    out = product
    rows, cols = _val(product).dim() - 2, _val(product).dim() - 1
    for dim, size, extra in ((rows, m, dm), (cols, n, dn)):
        if extra:
            with graph.inserting_before(node):
                out = graph.call_function(aten.slice.Tensor, (out, dim, 0, size))
            _fake_meta(out)
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def _output_only(node: fx.Node, sizes, padded, mode: bool | str = True) -> bool:
    """Whether ``node`` can be written into an output padded along N alone: a 2-D ``mm`` or
    plain ``addmm`` (no beta/alpha; not with ``mode`` "auto") with M and K aligned, whose second
    operand (K, N) has 16-byte-aligned rows or columns already (a transposed weight's stride is
    K)."""
    (m, k, n), (pm, pk, pn) = sizes, padded
    if (pm, pk) != (m, k) or pn == n or node.target is aten.bmm.default:
        return False
    if mode == "auto" and node.target is not aten.mm.default:
        return False  # ATen copies an addmm's bias into a strided output before the product
    if node.target is aten.addmm.default and (len(node.args) > 3 or node.kwargs):
        return False
    b = node.args[2] if node.target is aten.addmm.default else node.args[1]
    vb = _val(b)
    align = ALIGN_BYTES // vb.element_size()
    strides = vb.stride()
    return (strides[0] == 1 and strides[1] % align == 0) or (
        strides[1] == 1 and strides[0] % align == 0
    )


def _rewrite_output_only(graph: fx.Graph, node: fx.Node, n: int, pn: int) -> None:
    if node.target is aten.addmm.default:
        bias, a, b = node.args[:3]
    else:
        bias, (a, b) = None, node.args[:2]
    with graph.inserting_before(node):
        product = graph.call_function(MM_PADDED_N, (bias, a, b, pn))
    _fake_meta(product)
    with graph.inserting_before(node):
        out = graph.call_function(aten.slice.Tensor, (product, 1, 0, n))
    _fake_meta(out)
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def pad_matmuls(
    gm: fx.GraphModule,
    free_outputs: int = 0,
    output_only: bool | str = False,
    float32: bool = True,
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose unaligned matrix multiplies run on padded operands, and the log of
    decisions (one line per product that was considered). The first ``free_outputs`` outputs
    may come back in the padded layout (a view of the padded product: no copy); the others keep
    their traced strides. ``output_only``: products that need only N padded and whose second
    operand is aligned already are written into a padded output instead (module docstring;
    "auto": those without a bias).
    ``float32``: pad float32 products too (they run on TF32 tensor cores)."""
    products = [n for n in gm.graph.nodes if n.target in _MATMULS]
    if not products:
        return gm, ()
    plans = {p: _plan(p, float32) for p in products}
    wanted = [p for p, plan in plans.items() if not isinstance(plan, str)]
    log = [
        f"{p.name}: {p.target} kept ({plan})"
        for p, plan in plans.items()
        if isinstance(plan, str) and plan != "already aligned"
    ]
    if not wanted:
        return gm, tuple(log)
    if any(n.target in _STORAGE_OPS for n in gm.graph.nodes):
        # as_strided reads memory order, which a padded buffer changes under it
        return gm, (
            *log,
            *(f"{p.name}: {p.target} kept (the graph has an as_strided view)" for p in wanted),
        )
    graph, copies = copied_graph(gm)
    if not _static_inputs(graph):
        return gm, (
            *log,
            *(f"{p.name}: {p.target} kept (graph inputs of symbolic size)" for p in wanted),
        )
    mode, propagated = _meta_mode(graph)  # one fake mode for every value the pass makes or reads
    output = next(n for n in graph.nodes if n.op == "output")
    before = _output_values(output)
    memo: dict = {}
    for p in wanted:
        sizes, padded = plans[p]  # type: ignore[misc]
        if output_only and _output_only(copies[p], sizes, padded, output_only):
            _rewrite_output_only(graph, copies[p], sizes[2], padded[2])
            log.append(
                f"{p.name}: {p.target} {'x'.join(map(str, sizes))} written into an output "
                f"padded to N={padded[2]} (unaligned output leading dimension; operands as they are)"
            )
            continue
        _rewrite(graph, copies[p], sizes, padded, memo)
        log.append(
            f"{p.name}: {p.target} {'x'.join(map(str, sizes))} padded to "
            f"{'x'.join(map(str, padded))} (unaligned leading dimension)"
        )
    _propagate_meta(graph, mode, since=propagated)
    if not _keep_output_layouts(graph, output, before, free=free_outputs):
        return gm, (
            *log[: -len(wanted)],
            *(
                f"{p.name}: {p.target} kept (a graph output that is "
                "not contiguous would change layout)"
                for p in wanted
            ),
        )
    # the module is made once the graph is final: making it writes its Python code, as
    # recompile() does (once instead of twice)
    new_gm = fx.GraphModule(gm, graph)
    graph.lint()
    return new_gm, tuple(log)
