"""Convolutions on CUDA in channels-last layout, with their weights converted once.

cuDNN's Hopper convolution kernels work on NHWC tensors. Given NCHW ones (what a model holds and
traces with), cuDNN transposes the input and the weight into NHWC and the output back on every
call: ResNet-50 inference at batch 64 in bfloat16 spent 1.07 ms of its 4.0 ms of GPU time in
those transposes on the H200 (69 of them), where torch.compile, which lays convolution nets out
channels-last, spends none.

``use_channels_last(gm)`` is a pass over an inference graph's ATen graph before lowering (the
CUDA sibling of mkldnn.py's CPU pass, sharing its helpers). Each 2-D ``aten.convolution`` (not
transposed) becomes ``torchkiln::conv_channels_last(x, w, stride, padding, dilation, groups)``
plus its bias as a pointwise add (fused with what follows, as the bias of a plain convolution
is on GPUs):

- its input is made channels-last (an ``aten.clone``, which the lowering turns into a copy
  kernel, only at the first convolution: its output is channels-last, so the pointwise kernels
  after it and the next convolution read channels-last too; meta values are propagated again,
  and loop-ir realizes buffers with the strides their meta value has);
- its weight is converted to channels-last once and kept while the tensor is unchanged
  (``_weight``: keyed by the tensor object, its version counter and data pointer), so a frozen
  model pays no copy per call;
- graph outputs keep the strides they were traced with (a copy back where one changed).

Only inference graphs (contract C2's ``meta["free_output_strides"]`` is set): a training
forward saves activations for a backward traced with NCHW strides, where the copies back would
cost what the layout saves. Without a convolution, with symbolic sizes, or with an
``as_strided`` view in the graph (it reads memory order), the graph is left as it is, with the
reason in the log.
"""

from __future__ import annotations

import weakref

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .mkldnn import (
    _LIB,
    _STORAGE_OPS,
    _args_of,
    _drop_redundant_channels_last_copies,
    _fake_meta,
    _keep_output_layouts,
    _output_values,
    _propagate_meta,
    _static_inputs,
    _val,
)

aten = torch.ops.aten

_LIB.define(
    "conv_channels_last(Tensor x, Tensor weight, int[] stride, int[] padding, "
    "int[] dilation, int groups) -> Tensor"
)

#: id(weight) -> (a weak reference to it, (version, data pointer), its channels-last copy); an
#: entry goes when its tensor dies. A plain dict keyed by id, not a WeakIdKeyDictionary: that
#: builds a weak reference object in Python for every lookup (about 1.5 us per convolution)
_WEIGHTS: dict[int, tuple[weakref.ref, tuple[int, int], torch.Tensor]] = {}


def _forget(key: int, ref: weakref.ref) -> None:
    """The weight behind ``ref`` died: drop its entry (unless a newer tensor reusing its id
    already replaced it)."""
    hit = _WEIGHTS.get(key)
    if hit is not None and hit[0] is ref:
        del _WEIGHTS[key]


def _weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` in channels-last layout, converted once per change of the tensor."""
    hit = _WEIGHTS.get(id(weight))
    if hit is not None and hit[0]() is weight and hit[1] == (weight._version, weight.data_ptr()):
        return hit[2]
    if weight.is_contiguous(memory_format=torch.channels_last):
        return weight
    converted = weight.contiguous(memory_format=torch.channels_last)
    key = id(weight)
    _WEIGHTS[key] = (
        weakref.ref(weight, lambda ref, key=key: _forget(key, ref)),
        (weight._version, weight.data_ptr()),
        converted,
    )
    return converted


def _conv_channels_last(x, weight, stride, padding, dilation, groups):
    x = x.contiguous(memory_format=torch.channels_last)
    return aten.convolution.default(
        x, _weight(weight), None, stride, padding, dilation, False, [0, 0], groups
    )


def _conv_channels_last_fake(x, weight, stride, padding, dilation, groups):
    size = [x.shape[0], weight.shape[0]]
    for d in range(2):
        span = dilation[d] * (weight.shape[2 + d] - 1) + 1
        size.append((x.shape[2 + d] + 2 * padding[d] - span) // stride[d] + 1)
    return x.new_empty(size).contiguous(memory_format=torch.channels_last)


_LIB.impl("conv_channels_last", _conv_channels_last, "CompositeExplicitAutograd")
torch.library.register_fake("torchkiln::conv_channels_last", _conv_channels_last_fake, lib=_LIB)

CONV_CHANNELS_LAST = torch.ops.torchkiln.conv_channels_last.default
#: the wrapper calls this operator's function directly (no dispatcher round trip)
DIRECT_CALLS = {CONV_CHANNELS_LAST: _conv_channels_last}


def _why_not(conv: fx.Node) -> str | None:
    x, w = _val(conv.args[0]), _val(conv.args[1])
    transposed = conv.args[6]
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or not isinstance(w, torch.Tensor):
        return "not a 2-D convolution"
    if transposed:
        return "a transposed convolution"
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {x.dtype}"
    return None


def use_channels_last(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose 2-D convolutions run channels-last, and the log of decisions."""
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    if not convs:
        return gm, ()
    if any(n.target in _STORAGE_OPS for n in gm.graph.nodes):
        return gm, tuple(
            f"{c.name}: aten.convolution kept in NCHW (the graph has an as_strided "
            "view, whose values depend on the memory layout)"
            for c in convs
        )
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, copies))
    if not _static_inputs(graph):
        return gm, tuple(
            f"{c.name}: aten.convolution kept in NCHW (graph inputs of symbolic size)"
            for c in convs
        )
    mode = FakeTensorMode()
    _propagate_meta(graph, mode)
    propagated = _args_of(graph)
    output = next(n for n in graph.nodes if n.op == "output")
    # the outputs' traced layouts, read before any convolution is replaced (a replaced one that
    # is itself an output would otherwise look channels-last already)
    before = _output_values(output)
    log: list[str] = []
    changed = False
    for conv in [copies[c] for c in convs]:
        reason = _why_not(conv)
        if reason is not None:
            log.append(f"{conv.name}: aten.convolution kept in NCHW ({reason})")
            continue
        x, w, b, stride, padding, dilation, _transposed, _output_padding, groups = conv.args
        with graph.inserting_before(conv):
            if not _val(x).is_contiguous(memory_format=torch.channels_last):
                x = graph.call_function(
                    aten.clone.default, (x,), {"memory_format": torch.channels_last}
                )
                _fake_meta(x)
            new = graph.call_function(
                CONV_CHANNELS_LAST, (x, w, list(stride), list(padding), list(dilation), groups)
            )
            _fake_meta(new)
            out = new
            if b is not None:
                bias = graph.call_function(aten.view.default, (b, [1, -1, 1, 1]))
                _fake_meta(bias)
                out = graph.call_function(aten.add.Tensor, (new, bias))
                _fake_meta(out)
        conv.replace_all_uses_with(out)
        graph.erase_node(conv)
        changed = True
        log.append(f"{conv.name}: convolution channels-last (weight converted once)")
    if not changed:
        return gm, tuple(log)
    _propagate_meta(graph, mode, since=propagated)
    _drop_redundant_channels_last_copies(graph)
    if not _keep_output_layouts(graph, output, before):
        return gm, tuple(
            f"{c.name}: aten.convolution kept in NCHW (a graph output that is not "
            "contiguous would change layout)"
            for c in convs
        )
    # the module is made once the graph is final: making it writes its Python code, as
    # recompile() does (once instead of twice)
    new_gm = fx.GraphModule(gm, graph)
    graph.lint()
    return new_gm, tuple(log)
