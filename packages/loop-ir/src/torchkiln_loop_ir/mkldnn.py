"""CPU convolution through oneDNN (mkldnn): channels-last activations, prepacked weights, and the
activation after a convolution fused into the call as a oneDNN post-op.

``use_mkldnn_convolutions(gm)`` is a pass over the ATen graph before lowering. Each 2-D float32
CPU ``aten.convolution`` (not transposed) becomes ``torchkiln.mkldnn_convolution(x, w, b, ...,
attr)``:

- its input is made channels-last (an ``aten.clone`` the lowering turns into a copy kernel when
  the producer is not channels-last already); its output is channels-last, so the pointwise
  kernels after it and the next convolution read channels-last too (meta values are propagated
  again, and loop-ir realizes buffers with the strides their meta value has). oneDNN's NCHW
  path reorders both ways on every call; NHWC does not (measured ~30% faster per convolution on
  the 2-core CPU, single thread);
- its only consumer, when it is an activation oneDNN applies in the same pass (``relu``, and
  ``x * sigmoid(x)``, which is SiLU decomposed), is folded in as ``attr`` ("relu", "swish");
  every convolution left with ``attr="none"`` gets the reason in the pass's log;
- a weight that is a graph input (a parameter, or a folded constant from aot-partition's
  freezing) is reordered once into oneDNN's blocked format and reused while the tensor is
  unchanged (``_packed_weight``: keyed by the tensor object, its version counter, data pointer
  and the call's geometry; a computed weight is a new tensor each call and is not cached).

Without mkldnn in the torch build (``torch.backends.mkldnn.is_available()``), or for other
dtypes, devices, ranks and transposed convolutions, ``aten.convolution`` stays an extern call,
with the reason in the log.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten

_LIB = torch.library.Library("torchkiln", "FRAGMENT")
_LIB.define(
    "mkldnn_convolution(Tensor x, Tensor weight, Tensor? bias, int[] padding, int[] stride, "
    "int[] dilation, int groups, str attr, bool pack_weight) -> Tensor"
)
_LIB.define(
    "mkldnn_convolution_add(Tensor x, Tensor other, Tensor weight, Tensor? bias, int[] padding, "
    "int[] stride, int[] dilation, int groups, str attr, bool pack_weight) -> Tensor"
)

#: weight tensor -> (key, prepacked weight); entries die with their tensor
_PACKED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _packed_weight(
    weight: torch.Tensor, padding, stride, dilation, groups, input_size
) -> torch.Tensor:
    """``weight`` in oneDNN's blocked layout for this geometry, reordered once per change of the
    tensor (version counter, data pointer) or of the call's geometry."""
    key = (
        weight._version,
        weight.data_ptr(),
        tuple(padding),
        tuple(stride),
        tuple(dilation),
        groups,
        tuple(input_size),
    )
    hit = _PACKED.get(weight)
    if hit is not None and hit[0] == key:
        return hit[1]
    packed = torch.ops.mkldnn._reorder_convolution_weight(
        weight, list(padding), list(stride), list(dilation), groups, list(input_size)
    )
    _PACKED[weight] = (key, packed)
    return packed


def _contiguous_bias(bias):
    """oneDNN reads a bias as contiguous: one of stride 2 (a step slice) gave wrong results
    (fuzz seed 6849); a contiguous one passes as it is."""
    return bias.contiguous() if bias is not None else None


def _mkldnn_convolution(x, weight, bias, padding, stride, dilation, groups, attr, pack_weight):
    bias = _contiguous_bias(bias)
    if pack_weight:
        weight = _packed_weight(weight, padding, stride, dilation, groups, x.shape)
    return torch.ops.mkldnn._convolution_pointwise(
        x, weight, bias, padding, stride, dilation, groups, attr, [], ""
    )


def _mkldnn_convolution_fake(x, weight, bias, padding, stride, dilation, groups, attr, pack_weight):
    size = [x.shape[0], weight.shape[0]]
    for d in range(2):
        span = dilation[d] * (weight.shape[2 + d] - 1) + 1
        size.append((x.shape[2 + d] + 2 * padding[d] - span) // stride[d] + 1)
    return x.new_empty(size).contiguous(memory_format=torch.channels_last)


def _mkldnn_convolution_add(
    x, other, weight, bias, padding, stride, dilation, groups, attr, pack_weight
):
    """``attr(convolution(x) + other)``: the residual add as oneDNN's binary post-op."""
    bias = _contiguous_bias(bias)
    if pack_weight:
        weight = _packed_weight(weight, padding, stride, dilation, groups, x.shape)
    return torch.ops.mkldnn._convolution_pointwise.binary(
        x,
        other,
        weight,
        bias,
        padding,
        stride,
        dilation,
        groups,
        "add",
        None,
        None if attr == "none" else attr,
        [],
        None,
    )


def _mkldnn_convolution_add_fake(
    x, other, weight, bias, padding, stride, dilation, groups, attr, pack_weight
):
    return _mkldnn_convolution_fake(
        x, weight, bias, padding, stride, dilation, groups, attr, pack_weight
    )


_LIB.impl("mkldnn_convolution", _mkldnn_convolution, "CPU")
torch.library.register_fake("torchkiln::mkldnn_convolution", _mkldnn_convolution_fake, lib=_LIB)
_LIB.impl("mkldnn_convolution_add", _mkldnn_convolution_add, "CPU")
torch.library.register_fake(
    "torchkiln::mkldnn_convolution_add", _mkldnn_convolution_add_fake, lib=_LIB
)

MKLDNN_CONVOLUTION = torch.ops.torchkiln.mkldnn_convolution.default
MKLDNN_CONVOLUTION_ADD = torch.ops.torchkiln.mkldnn_convolution_add.default
#: the wrapper calls these operators' CPU functions directly (no dispatcher round trip)
DIRECT_CALLS = {
    MKLDNN_CONVOLUTION: _mkldnn_convolution,
    MKLDNN_CONVOLUTION_ADD: _mkldnn_convolution_add,
}


#: ops whose result depends on memory order, not only on the logical values of their input
_STORAGE_OPS = {aten.as_strided.default, aten.as_strided_copy.default}
#: ops that write into their first operand by its memory order
_STORAGE_WRITES = {aten.as_strided_scatter.default}
#: views that a new layout can make impossible without a copy: their meta is a reshape's
_RESHAPES = {
    aten.view.default: aten.reshape.default,
    aten._unsafe_view.default: aten.reshape.default,
}


def mkldnn_available() -> bool:
    return bool(torch.backends.mkldnn.is_available())


def copied_graph(gm: fx.GraphModule) -> tuple[fx.Graph, dict[fx.Node, fx.Node]]:
    """A copy of ``gm``'s graph for a pass to change (its output node included), and the map
    from ``gm``'s nodes to their copies."""
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, copies))
    return graph, copies


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def time_min(
    fns: dict[str, Callable[[], Any]],
    budget_s: float = 0.03,
    min_reps: int = 3,
    calls: int = 1,
    sync: Callable[[], Any] | None = None,
) -> dict[str, float]:
    """The fastest of several interleaved runs of each candidate, in seconds a call
    (interleaving and the minimum keep other processes' load on the shared machine out of the
    comparison). A run is ``calls`` calls, then ``sync()`` (a GPU's queue drained: its calls
    return before their kernels end); the linear-layer passes time their choices with it
    (``mkldnn_linear.py``, ``cublas_epilogues.py``)."""
    sync = sync or (lambda: None)
    for f in fns.values():
        f()
    sync()
    best = dict.fromkeys(fns, math.inf)
    start, reps = time.perf_counter(), 0
    while reps < min_reps or (time.perf_counter() - start < budget_s and reps < 50):
        for name, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            sync()
            best[name] = min(best[name], (time.perf_counter() - t0) / calls)
        reps += 1
    return best


def gemm_operands(node: fx.Node) -> tuple[Any, Any, Any] | str:
    """(bias or None, x, w) of an ``addmm(bias, x, w)`` or ``mm(x, w)``, or why not (an
    ``addmm`` that scales: alpha or beta other than 1). The linear-layer passes share it
    (``mkldnn_linear.py``, ``cublas_epilogues.py``)."""
    if node.target is aten.addmm.default:
        if len(node.args) != 3 or any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")):
            return "addmm with alpha/beta"
        bias, x, w = node.args
        return bias, x, w
    x, w = node.args[:2]
    return None, x, w


def bias_vector(bias: Any, width: int, dtype: torch.dtype) -> bool:
    """Whether ``bias`` is a 1-D tensor of ``width`` values of ``dtype`` (meta value)."""
    bv = _val(bias)
    return (
        isinstance(bv, torch.Tensor)
        and bv.dim() == 1
        and bv.dtype == dtype
        and bv.shape[0] == width
    )


def _why_not(node: fx.Node) -> str | None:
    """Why this convolution stays ``aten.convolution``, or None when oneDNN takes it."""
    x, w, _b, _stride, _padding, _dilation, transposed, _op, _groups = node.args
    y, xv, wv = _val(node), _val(x), _val(w)
    if not mkldnn_available():
        return "torch was built without mkldnn"
    if transposed:
        return "transposed convolution"
    if not all(isinstance(v, torch.Tensor) for v in (y, xv, wv)):
        return "no tensor meta value"
    if y.dim() != 4:
        return f"{y.dim() - 2}-D convolution (2-D only)"
    if y.device.type != "cpu" or y.dtype != torch.float32 or wv.dtype != torch.float32:
        return f"{y.dtype} on {y.device.type} (float32 on the CPU only)"
    if any(not isinstance(s, int) for s in (*xv.shape, *wv.shape)):
        return "symbolic sizes"
    return None


def _residual(node: fx.Node) -> tuple[fx.Node | None, str, list[fx.Node]]:
    """(the other operand, activation after the add, replaced nodes) when the sole consumer of
    ``node`` adds a tensor of its own shape and dtype (a residual connection), else (None, ...)."""
    users = list(node.users)
    if len(users) != 1 or users[0].target is not aten.add.Tensor or users[0].kwargs:
        return None, "none", []
    add = users[0]
    others = [a for a in add.args if a is not node]
    if len(others) != 1 or not isinstance(others[0], fx.Node):
        return None, "none", []
    other, y = _val(others[0]), _val(node)
    if not isinstance(other, torch.Tensor) or other.shape != y.shape or other.dtype != y.dtype:
        return None, "none", []
    after = list(add.users)
    if len(after) == 1 and after[0].target is aten.relu.default:
        return others[0], "relu", [add, after[0]]
    return others[0], "none", [add]


def _activation(node: fx.Node) -> tuple[str, list[fx.Node], str]:
    """(oneDNN post-op, the nodes it replaces, reason when none) for the consumers of ``node``."""
    users = list(node.users)
    if len(users) == 1 and users[0].target is aten.relu.default:
        return "relu", users, ""
    if len(users) == 2:
        sig = next((u for u in users if u.target is aten.sigmoid.default), None)
        mul = next((u for u in users if u.target is aten.mul.Tensor), None)
        if (
            sig is not None
            and mul is not None
            and len(sig.users) == 1
            and mul in sig.users
            and set(mul.args) == {node, sig}
        ):
            return "swish", [sig, mul], ""
    if not users:
        return "none", [], "no consumer"
    if len(users) > 1:
        return (
            "none",
            [],
            f"its output has {len(users)} consumers (an activation is fused only into a sole consumer)",
        )
    return (
        "none",
        [],
        (
            f"its consumer {users[0].target} is not an activation oneDNN applies in the "
            "convolution (relu, silu)"
        ),
    )


def use_mkldnn_convolutions(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose CPU convolutions go through oneDNN, and the log of decisions (one
    line per convolution: what it became, or why not)."""
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    if not convs:
        return gm, ()
    copy = layout_copy(gm, convs, "kept")
    if isinstance(copy, tuple):
        return gm, copy
    graph, copies = copy.graph, copy.copies
    log: list[str] = []
    placeholders = {n for n in graph.nodes if n.op == "placeholder"}
    changed = False
    for conv in [copies[c] for c in convs]:
        reason = _why_not(conv)
        if reason is not None:
            log.append(f"{conv.name}: aten.convolution kept ({reason})")
            continue
        x, w, b, stride, padding, dilation, _transposed, _op, groups = conv.args
        if tuple(_val(w).shape[2:]) == (1, 1):
            if not _val(x).is_contiguous(memory_format=torch.channels_last):
                with graph.inserting_before(conv):
                    cl = graph.call_function(
                        aten.clone.default, (x,), {"memory_format": torch.channels_last}
                    )
                    _fake_meta(cl)
                conv.replace_input_with(x, cl)
                x = cl
            if list(padding) == [0, 0] and groups == 1:
                _as_matmul(graph, conv, x, w, b, list(stride))
                strided = "" if list(stride) == [1, 1] else " of the strided pixels (copied)"
                log.append(
                    f"{conv.name}: a 1x1 convolution as a matrix multiply over the "
                    f"channels-last pixels{strided} (faster than either convolution call "
                    "here); activation not fused"
                )
            else:
                # padded or grouped 1x1: rare; ATen's channels-last path
                _fake_meta(conv)
                log.append(
                    f"{conv.name}: aten.convolution on channels-last (a 1x1 kernel with "
                    "padding or groups; activation not fused)"
                )
            changed = True
            continue
        geometry = (list(padding), list(stride), list(dilation), groups)
        other, attr, replaced = _residual(conv)
        why = ""
        if other is None:
            attr, replaced, why = _activation(conv)
        # after the last input the new call reads: the residual operand may come after conv
        with graph.inserting_before(replaced[0] if replaced else conv):
            if not _val(x).is_contiguous(memory_format=torch.channels_last):
                x = graph.call_function(
                    aten.clone.default, (x,), {"memory_format": torch.channels_last}
                )
                _fake_meta(x)
            if other is not None:
                new = graph.call_function(
                    MKLDNN_CONVOLUTION_ADD, (x, other, w, b, *geometry, attr, w in placeholders)
                )
            else:
                new = graph.call_function(
                    MKLDNN_CONVOLUTION, (x, w, b, *geometry, attr, w in placeholders)
                )
            _fake_meta(new)
        last = replaced[-1] if replaced else conv
        last.replace_all_uses_with(new)
        for n in reversed([conv, *replaced]):
            if not n.users:
                graph.erase_node(n)
        changed = True
        if other is not None:
            fused = " with the residual add" + (f" and {attr}" if attr != "none" else "") + " fused"
        else:
            fused = f" with {attr} fused" if attr != "none" else f"; activation not fused: {why}"
        log.append(f"{conv.name}: oneDNN convolution, channels-last{fused}")
    if not changed:
        return gm, tuple(log)
    return finish_layout(gm, copy, convs, log, "kept")


def _as_matmul(
    graph: fx.Graph, conv: fx.Node, x: fx.Node, w: fx.Node, b: Any, stride: list[int]
) -> None:
    """Replace a 1x1, unpadded convolution of the channels-last ``x`` by
    ``(N*H*W, C) @ (C, K) (+ bias)``: the pixels of a channels-last tensor are the rows of a
    matrix, and the result's rows are the output's channels-last pixels (1x1 kernels at
    2x{16..128}x32x32: 36 us against ATen's 44 us and oneDNN's 67 us, one thread). With a
    stride the kept pixels (every stride-th row and column) are first copied into such a matrix
    (a ResNet shortcut, 2x16x32x32 -> 32 at stride 2: copy + addmm 13 us against oneDNN's
    prepacked call 32 us and ATen's 40 us, one thread: a oneDNN call's fixed cost is ~20 us)."""
    k = _val(w).shape[0]

    def add(target, *args):
        with graph.inserting_before(conv):
            node = graph.call_function(target, args)
        _fake_meta(node)
        return node

    if stride != [1, 1]:
        for dim, step in ((2, stride[0]), (3, stride[1])):
            if step != 1:
                x = add(aten.slice.Tensor, x, dim, 0, _val(x).shape[dim], step)
    n, c, h, wd = _val(x).shape
    # a view on stride 1; a copy of the kept pixels otherwise (loop-ir lowers the reshape)
    reshape = aten.view.default if stride == [1, 1] else aten.reshape.default
    rows = add(reshape, add(aten.permute.default, x, [0, 2, 3, 1]), [n * h * wd, c])
    weight = add(aten.permute.default, add(aten.reshape.default, w, [k, c]), [1, 0])
    out = (
        add(aten.addmm.default, b, rows, weight)
        if b is not None
        else add(aten.mm.default, rows, weight)
    )
    y = add(aten.permute.default, add(aten.view.default, out, [n, h, wd, k]), [0, 3, 1, 2])
    conv.replace_all_uses_with(y)
    graph.erase_node(conv)


@dataclass
class LayoutCopy:
    """A graph copied for a pass that changes layouts (``layout_copy``): ``copies`` maps the old
    nodes to the new, every meta value is propagated again in ``mode`` (``propagated``: the
    ``_args_of`` right after), and ``before`` holds the outputs' traced values, read before any
    node is replaced (a replaced convolution that is an output, a training forward's value saved
    for batch norm's backward, would otherwise already show its new strides, and go uncopied
    into a backward that reads it as traced: gradients were wrong)."""

    graph: fx.Graph
    copies: dict[fx.Node, fx.Node]
    mode: FakeTensorMode
    output: fx.Node
    propagated: dict[fx.Node, tuple[Any, Any]]
    before: list[Any]
    #: each op reading memory order (``_STORAGE_OPS``, ``_STORAGE_WRITES``) -> the traced value
    #: of the operand whose strides it reads (``finish_layout`` checks they did not change)
    strided: dict[fx.Node, Any]


def layout_copy(
    gm: fx.GraphModule, convs: list[fx.Node], kept: str = "kept in NCHW"
) -> LayoutCopy | tuple[str, ...]:
    """``gm``'s graph copied, for a pass that changes the layout of ``convs``, or the log lines
    of why not: inputs of symbolic size (the pass fakes them again). An ``as_strided`` view
    reads memory order: one that only restrides its input is dropped first
    (``_drop_restrides``); the others, and ``as_strided_scatter``, are kept in
    ``LayoutCopy.strided`` with their operand's traced value, and ``finish_layout`` gives up
    where the pass changed that operand's strides (a backward's gradient of a restride scatters
    into a new flat buffer, whose layout no pass changes: ConvNeXt's training backward)."""

    def refused(why: str) -> tuple[str, ...]:
        return tuple(
            f"{c.name}: aten.{c.target.__name__.split('.')[0]} {kept} ({why})" for c in convs
        )

    graph, copies = copied_graph(gm)
    _drop_restrides(graph)
    if not _static_inputs(graph):
        return refused("graph inputs of symbolic size")
    mode = FakeTensorMode()
    _propagate_meta(graph, mode)  # one fake mode for every value the pass makes or reads
    propagated = _args_of(graph)
    output = next(n for n in graph.nodes if n.op == "output")
    strided = {
        n: _val(n.args[0]) for n in graph.nodes if n.target in _STORAGE_OPS | _STORAGE_WRITES
    }
    return LayoutCopy(graph, copies, mode, output, propagated, _output_values(output), strided)


def _drop_restrides(graph: fx.Graph) -> None:
    """Drop each ``as_strided`` that only restrides its input: the same sizes and storage
    offset, and the same strides wherever a size is above one, so each element is read where
    the input has it. ATen's ``adaptive_avg_pool2d`` to one pixel gives its ``(N, C, 1, 1)``
    mean the strides of a channels-last input so (every timm head's global pooling after
    ConvNeXt's last block). Its values are its input's, whatever layout a pass then gives that
    input, so its uses read the input. One that is a graph output stays (its strides are the
    caller's), and so does one of symbolic sizes."""
    for node in list(graph.nodes):
        if node.target not in _STORAGE_OPS or any(u.op == "output" for u in node.users):
            continue
        x, size, stride = node.args[:3]
        offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
        val = _val(x)
        if not isinstance(val, torch.Tensor) or not all(
            isinstance(v, int) for v in (*size, *stride, *val.shape, *val.stride())
        ):
            continue
        if list(size) != list(val.shape) or offset not in (None, val.storage_offset()):
            continue
        if all(n == 1 or s == t for n, s, t in zip(size, stride, val.stride())):
            node.replace_all_uses_with(x)
            graph.erase_node(node)


def finish_layout(
    gm: fx.GraphModule,
    copy: LayoutCopy,
    convs: list[fx.Node],
    log: list[str],
    kept: str = "kept in NCHW",
    free_tail: int = 0,
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """The module of ``copy``'s graph once a layout pass changed it, and ``log``: meta values
    propagated again (what changed since ``layout_copy``), the copies to channels-last that the
    new strides made redundant dropped, every output given its traced strides but the last
    ``free_tail``; ``gm`` itself, with why, when an output that is not contiguous would change."""
    _propagate_meta(copy.graph, copy.mode, since=copy.propagated)
    moved = [
        n.name for n, traced in copy.strided.items() if not same_strides(traced, _val(n.args[0]))
    ]
    if moved:
        why = (
            f"{moved[0]} reads memory order (an as_strided view) of a value whose strides the "
            "layout would change"
        )
        return gm, tuple(
            f"{c.name}: aten.{c.target.__name__.split('.')[0]} {kept} ({why})" for c in convs
        )
    _drop_redundant_channels_last_copies(copy.graph)
    if not _keep_output_layouts(copy.graph, copy.output, copy.before, free_tail=free_tail):
        why = "a graph output that is not contiguous would change layout"
        return gm, tuple(
            f"{c.name}: aten.{c.target.__name__.split('.')[0]} {kept} ({why})" for c in convs
        )
    # the module is made once the graph is final: making it writes its Python code, as
    # recompile() does (once instead of twice)
    new_gm = fx.GraphModule(gm, copy.graph)
    copy.graph.lint()
    return new_gm, tuple(log)


def same_strides(traced: torch.Tensor, real: torch.Tensor) -> bool:
    """The same sizes and the same strides where they matter: dims of size 1 may have any."""
    return tuple(traced.shape) == tuple(real.shape) and all(
        size == 1 or a == b for size, a, b in zip(real.shape, traced.stride(), real.stride())
    )


def _output_values(output: fx.Node) -> list[Any]:
    """The meta values of a graph's outputs, as the passes read them before changing anything
    (a graph returning one value, not a tuple, has one)."""
    outs = output.args[0]
    return [_val(o) for o in ([outs] if isinstance(outs, fx.Node) else outs)]


def _keep_output_layouts(
    graph: fx.Graph, output: fx.Node, before: list[Any], free: int = 0, free_tail: int = 0
) -> bool:
    """Give every graph output the strides it had before the pass (the caller, or a backward
    graph reading saved activations, was traced with them): a contiguous output that became
    channels-last is copied back; False when a non-contiguous one changed (pass abandoned).
    The first ``free`` outputs keep their new strides (results handed to the user as they are:
    contract C2's ``meta["free_output_strides"]``), and so do the last ``free_tail`` (a training
    forward's saved values: ``meta["free_saved_strides"]``). ``before``: ``_output_values`` read
    before the pass."""
    single = isinstance(output.args[0], fx.Node)  # a graph returning one value, not a tuple
    outs = [output.args[0]] if single else list(output.args[0])
    for i, (node, old) in enumerate(zip(outs, before)):
        if i < free or i >= len(outs) - free_tail:
            continue
        new = _val(node)
        if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
            continue
        if new.stride() == old.stride() or old.numel() <= 1:
            continue
        if not old.is_contiguous():
            return False
        with graph.inserting_before(output):
            copy = graph.call_function(
                aten.clone.default, (node,), {"memory_format": torch.contiguous_format}
            )
            _fake_meta(copy)
        outs[i] = copy
    output.args = (outs[0],) if single else (tuple(outs),)
    return True


def _drop_redundant_channels_last_copies(graph: fx.Graph) -> None:
    """Remove the copies to channels-last that a pass decided on a producer's old strides where
    the producer is channels-last now (a max-pool after a convolution)."""
    for n in list(graph.nodes):
        if (
            n.target is aten.clone.default
            and n.kwargs.get("memory_format") is torch.channels_last
            and _val(n.args[0]).is_contiguous(memory_format=torch.channels_last)
            and n.args[0].op != "placeholder"
        ):
            n.replace_all_uses_with(n.args[0])
            graph.erase_node(n)


def _fake_meta(node: fx.Node) -> None:
    """meta['val'] of a node this pass made, from its inputs' (a later convolution reads it)."""
    mode = next(v.fake_mode for a in node.all_input_nodes if hasattr(v := _val(a), "fake_mode"))
    args, kwargs = torch.utils._pytree.tree_map(
        lambda a: _val(a) if isinstance(a, fx.Node) else a, (node.args, node.kwargs)
    )
    with mode:
        node.meta["val"] = node.target(*args, **kwargs)


def _static_inputs(graph: fx.Graph) -> bool:
    """Every placeholder is a tensor of static size and strides (the pass re-fakes them)."""
    return all(
        isinstance(v := _val(n), torch.Tensor)
        and all(isinstance(s, int) for s in (*v.shape, *v.stride()))
        for n in graph.nodes
        if n.op == "placeholder"
    )


def _args_of(graph: fx.Graph) -> dict[fx.Node, tuple[Any, Any]]:
    """Each node's ``(args, kwargs)`` objects (fx replaces them when a node is rewired): taken
    right after a ``_propagate_meta``, it tells the next one which nodes a pass made or rewired."""
    return {n: (n.args, n.kwargs) for n in graph.nodes}


def _same_meta(a: Any, b: Any) -> bool:
    """Whether two meta values describe the same tensors (sizes, strides, offset, dtype,
    device, requires_grad) in the same structure: what every op computes its result's from."""
    la, sa = torch.utils._pytree.tree_flatten(a)
    lb, sb = torch.utils._pytree.tree_flatten(b)
    if sa != sb:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if (x.shape, x.stride(), x.storage_offset(), x.dtype, x.device, x.requires_grad) != (
                y.shape,
                y.stride(),
                y.storage_offset(),
                y.dtype,
                y.device,
                y.requires_grad,
            ):
                return False
        elif (
            isinstance(x, torch.Tensor)
            or isinstance(y, torch.Tensor)
            or type(x) is not type(y)
            or x != y
        ):
            return False
    return True


def _meta_mode(graph: fx.Graph) -> tuple[FakeTensorMode, dict[fx.Node, tuple[Any, Any]]]:
    """The fake mode a pass makes its values in, and ``_args_of`` the graph as propagated in it.

    When every placeholder and call's meta['val'] is made of fake tensors of one mode (a graph
    from make_fx, or aot-partition's forward and backward graphs), that mode: the values are
    already what a propagation in it would recompute (each node from values like its inputs',
    to a value like its own), and the pass's second, incremental propagation recomputes only
    what it changes. Otherwise (real constants, several modes, a value missing) a new mode and a
    full propagation. The full one was three quarters of pad_matmuls' time on a BERT training
    step (2,700 fake ops per graph, for one padded product)."""
    mode = _one_fake_mode(graph)
    if mode is None:
        mode = FakeTensorMode()
        _propagate_meta(graph, mode)
    return mode, _args_of(graph)


def _one_fake_mode(graph: fx.Graph) -> FakeTensorMode | None:
    """The single fake mode of every value in the graph's meta, or None."""
    from torch._subclasses.fake_tensor import FakeTensor

    mode = None
    for n in graph.nodes:
        if n.op not in ("placeholder", "call_function"):
            continue
        if "val" not in n.meta:
            return None
        for leaf in torch.utils._pytree.tree_leaves(n.meta["val"]):
            if isinstance(leaf, torch.Tensor):
                if not isinstance(leaf, FakeTensor) or (
                    mode is not None and leaf.fake_mode is not mode
                ):
                    return None
                mode = leaf.fake_mode
            elif isinstance(leaf, torch.SymInt | torch.SymFloat | torch.SymBool):
                return None
    return mode


def _propagate_meta(
    graph: fx.Graph, mode: FakeTensorMode, since: dict[fx.Node, tuple[Any, Any]] | None = None
) -> None:
    """Recompute every node's meta['val'] in ``mode`` from the placeholders' sizes and strides
    (strides change downstream of the convolutions: channels-last flows through the pointwise
    ops; and the graph's own values may come from several fake modes, or be real constants).

    ``since``: ``_args_of`` taken right after the previous propagation in ``mode``; then only
    the nodes made or rewired since, and the nodes reading a value that came out different
    (sizes, strides, offset, dtype), are recomputed: every other node would be recomputed from
    values like its inputs', to a value like its own (a pass's second propagation over a whole
    training graph was half its compile time; a padded matmul's slice changes the strides of a
    view or two after it, not the pointwise ops beyond)."""
    env: dict[fx.Node, Any] = {}
    changed: set[fx.Node] = set()
    with mode:
        for n in graph.nodes:
            old = None
            if since is not None and n.op in ("placeholder", "call_function"):
                was = since.get(n)
                if (
                    was is not None
                    and was[0] is n.args
                    and was[1] is n.kwargs
                    and not any(a in changed for a in n.all_input_nodes)
                ):
                    env[n] = n.meta["val"]
                    continue
                old = n.meta.get("val")
            if n.op == "placeholder":
                v = _val(n)
                env[n] = torch.empty_strided(
                    tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device=v.device
                )
                n.meta["val"] = env[n]
            elif n.op == "call_function":
                args, kwargs = torch.utils._pytree.tree_map(
                    lambda a: env[a] if isinstance(a, fx.Node) else a, (n.args, n.kwargs)
                )
                if n.target is operator.getitem:
                    env[n] = args[0][args[1]]
                else:  # loop-ir lowers a view it cannot restride as a reshape (a copy)
                    env[n] = _RESHAPES.get(n.target, n.target)(*args, **kwargs)
                n.meta["val"] = env[n]
            if since is not None and (old is None or not _same_meta(old, env.get(n))):
                changed.add(n)
