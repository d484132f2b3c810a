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
- graph outputs keep the strides they were traced with (a copy back where one changed);
- a 1x1 convolution of stride 1, no padding and one group, in float16 or bfloat16, becomes
  ``torchkiln::conv1x1_channels_last(x, w)``: one matrix multiply of the channels-last pixels
  (a view) by the weight (a view), whose result is the channels-last output. Inference of
  MobileNetV3 at batch 128 (47 such convolutions of its 63) was bound by cuDNN's host time,
  about 30 us a convolution; with this its step went from 3.42 to 2.87 ms on the H200. The
  host time of one ``mm`` call and the kernels cuBLAS picks were not measured on their own.

That is for inference graphs (contract C2's ``meta["free_output_strides"]`` is set). Training
graphs go through ``use_channels_last_training`` (below): convolutions and their backwards stay
ATen calls reading channels-last activations (but the depthwise ones ``conv_depthwise`` takes,
forward and input gradient), the forward's saved values stay channels-last, and the backward
graph is compiled for the strides they come with (``adopt_input_strides``). Without
a convolution, with symbolic sizes, or with an ``as_strided`` view of a value whose strides the
pass would change (it reads memory order; one that only restrides its input, as
``adaptive_avg_pool2d`` to one pixel makes, is dropped first: mkldnn.py's ``_drop_restrides``;
one of a buffer the graph makes, a restride's gradient, keeps its strides), a graph is left as
it is, with the reason in the log.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .errors import LoweringError
from .memory import keep_result
from .mkldnn import (
    _LIB,
    _STORAGE_OPS,
    _STORAGE_WRITES,
    _drop_restrides,
    _fake_meta,
    _keep_output_layouts,
    _output_values,
    _propagate_meta,
    _static_inputs,
    _val,
    copied_graph,
    finish_layout,
    layout_copy,
    same_strides,
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


def _forget(cache: dict[int, Any], key: int, ref: weakref.ref) -> None:
    """The weight behind ``ref`` died: drop its entry (unless a newer tensor reusing its id
    already replaced it)."""
    hit = cache.get(key)
    if hit is not None and hit[0] is ref:
        del cache[key]


def _cached(
    cache: dict[int, tuple[weakref.ref, tuple[int, int], torch.Tensor]],
    weight: torch.Tensor,
    convert: Any,
) -> torch.Tensor:
    """``convert(weight)``, kept in ``cache`` while the tensor is unchanged (its version counter
    and data pointer) and forgotten when it dies. ``convert`` may return ``weight`` itself
    (already in the layout wanted): that is not kept, the cache must not hold the tensor."""
    hit = cache.get(id(weight))
    if hit is not None and hit[0]() is weight and hit[1] == (weight._version, weight.data_ptr()):
        return hit[2]
    converted = convert(weight)
    if converted is weight:
        return weight
    key = id(weight)
    cache[key] = (
        weakref.ref(weight, lambda ref, key=key: _forget(cache, key, ref)),
        (weight._version, weight.data_ptr()),
        converted,
    )
    return converted


def _channels_last_copy(weight: torch.Tensor) -> torch.Tensor:
    if weight.is_contiguous(memory_format=torch.channels_last):
        return weight
    return weight.contiguous(memory_format=torch.channels_last)


def _weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` in channels-last layout, converted once per change of the tensor."""
    return _cached(_WEIGHTS, weight, _channels_last_copy)


def _conv_channels_last(x, weight, stride, padding, dilation, groups):
    x = x.contiguous(memory_format=torch.channels_last)
    # the Python binding, not the operator object: half the host time (wrapper.python_binding)
    return torch.convolution(
        x, _weight(weight), None, stride, padding, dilation, False, [0, 0], groups
    )


def _conv_channels_last_fake(x, weight, stride, padding, dilation, groups):
    size = [x.shape[0], weight.shape[0]]
    for d in range(2):
        span = dilation[d] * (weight.shape[2 + d] - 1) + 1
        size.append((x.shape[2 + d] + 2 * padding[d] - span) // stride[d] + 1)
    return _channels_last_empty(x, size)


def _channels_last_empty(x: torch.Tensor, size: list[Any]) -> torch.Tensor:
    """An empty channels-last tensor as ATen allocates one, strides of size-1 dims included: a
    (N, C, 1, 1) result has strides (C, 1, C, C). ``x.new_empty(size).contiguous(memory_format=
    torch.channels_last)`` keeps (C, 1, 1, 1) (already channels-last contiguous), which the
    wrapper then found different from the real result's and copied on every call (MobileNetV3's
    squeeze-excitation 1x1 convolutions: 17 copy kernels a call)."""
    return torch.empty(size, dtype=x.dtype, device=x.device, memory_format=torch.channels_last)


_LIB.impl("conv_channels_last", _conv_channels_last, "CompositeExplicitAutograd")
torch.library.register_fake("torchkiln::conv_channels_last", _conv_channels_last_fake, lib=_LIB)

_LIB.define("conv1x1_channels_last(Tensor x, Tensor weight) -> Tensor")


def _conv1x1_channels_last(x, weight):
    """A 1x1 convolution (stride 1, no padding, one group) over a channels-last input: one
    matrix multiply of the pixels (N*H*W rows of C) by the weight's (C, C_out) view, whose
    result is the channels-last output. It replaces cuDNN's call, which cost about 30 us of host
    time (H200's host), the bound of MobileNetV3's inference at batch 128."""
    n, c, h, w = x.shape
    cout = weight.shape[0]
    x = x.contiguous(memory_format=torch.channels_last)
    pixels = x.as_strided((n * h * w, c), (c, 1))
    # (C_out, C, 1, 1) read as (C, C_out): valid for any strides, the kernel dims are size 1
    out = torch.mm(pixels, weight.as_strided((c, cout), (weight.stride(1), weight.stride(0))))
    return out.as_strided((n, cout, h, w), (h * w * cout, 1, w * cout, cout))


def _conv1x1_channels_last_fake(x, weight):
    n, _, h, w = x.shape
    return _channels_last_empty(x, [n, weight.shape[0], h, w])


_LIB.impl("conv1x1_channels_last", _conv1x1_channels_last, "CompositeExplicitAutograd")
torch.library.register_fake(
    "torchkiln::conv1x1_channels_last", _conv1x1_channels_last_fake, lib=_LIB
)

_LIB.define("conv_taps(Tensor weight) -> Tensor")
_LIB.define(
    "conv_direct(Tensor x, Tensor taps, int[] stride, int[] padding, int[] dilation, "
    "int groups) -> Tensor"
)

#: id(weight) -> its taps' entry, as ``_WEIGHTS``
_TAPS: dict[int, tuple[weakref.ref, tuple[int, int], torch.Tensor]] = {}


def _taps_copy(weight: torch.Tensor) -> torch.Tensor:
    # in the weight's own dtype: float32 taps for a 16-bit weight saved the kernel an unpacking
    # instruction per tap and output, but doubled the bytes of its weight loads, and the bf16
    # kernels ran 20-35% slower on the H200 (session 17's gpu_direct_conv.py against 16's)
    return weight.permute(1, 2, 3, 0).to(memory_format=torch.contiguous_format, copy=True)


def _conv_taps(weight):
    """``weight`` (C_out, C_in per group, kh, kw) laid out (C_in per group, kh, kw, C_out), the
    layout a direct convolution's kernel reads (lowering/convolution.py), in its own dtype,
    converted once per change of the tensor."""
    return _cached(_TAPS, weight, _taps_copy)


def _conv_taps_fake(weight):
    return weight.new_empty((*weight.shape[1:], weight.shape[0]))


def _conv_direct(x, taps, stride, padding, dilation, groups):
    """A direct convolution run by ATen (the lowering's fallback): its weight read back from
    ``taps``, its output channels-last, as the generated kernel writes it."""
    weight = taps.permute(3, 0, 1, 2).to(x.dtype)
    out = aten.convolution.default(
        x, weight, None, stride, padding, dilation, False, [0, 0], groups
    )
    return out.contiguous(memory_format=torch.channels_last)


def _conv_direct_fake(x, taps, stride, padding, dilation, groups):
    return _conv_channels_last_fake(x, taps.permute(3, 0, 1, 2), stride, padding, dilation, groups)


_LIB.impl("conv_taps", _conv_taps, "CompositeExplicitAutograd")
torch.library.register_fake("torchkiln::conv_taps", _conv_taps_fake, lib=_LIB)
_LIB.impl("conv_direct", _conv_direct, "CompositeExplicitAutograd")
torch.library.register_fake("torchkiln::conv_direct", _conv_direct_fake, lib=_LIB)

_LIB.define("conv_depthwise(Tensor x, Tensor taps, Tensor? bias, int[] padding) -> Tensor")

#: device type -> a code generator's kernel for ``torchkiln::conv_depthwise``
#: (``register_depthwise_kernel``)
_DEPTHWISE_KERNELS: dict[str, Any] = {}


def register_depthwise_kernel(device_type: str, kernel: Any) -> None:
    """Make ``kernel(x, taps, bias, padding)`` the implementation of ``torchkiln::conv_depthwise``
    on ``device_type``, so that ``use_channels_last`` sends depthwise convolutions there
    (codegen-triton registers its strip kernel for "cuda"). Its contract: ``x`` (N, C, H, W)
    channels-last, ``taps`` (1, kh, kw, C) contiguous (``conv_taps``), ``bias`` (C,) or None,
    stride and dilation 1, ``padding`` (ph, pw); returns the (N, C, OH, OW) convolution,
    channels-last, in ``x``'s dtype."""
    _DEPTHWISE_KERNELS[device_type] = kernel


def depthwise_kernel(device_type: str | None) -> Any:
    """The kernel registered for ``device_type``, or None."""
    return _DEPTHWISE_KERNELS.get(device_type) if device_type is not None else None


def _conv_depthwise(x, taps, bias, padding):
    """A depthwise convolution (stride and dilation 1, one output channel per input channel) by
    the kernel registered for ``x``'s device, else by ATen, channels-last."""
    kernel = _DEPTHWISE_KERNELS.get(x.device.type)
    if kernel is not None:
        return kernel(x, taps, bias, padding)
    weight = taps.permute(3, 0, 1, 2).to(x.dtype)
    out = aten.convolution.default(
        x, weight, bias, [1, 1], padding, [1, 1], False, [0, 0], x.shape[1]
    )
    # the strides of the fake result (and of a registered kernel's), size-1 dims included
    return _channels_last_empty(x, list(out.shape)).copy_(out)


def _conv_depthwise_fake(x, taps, bias, padding):
    return _conv_channels_last_fake(x, taps.permute(3, 0, 1, 2), [1, 1], padding, [1, 1], 1)


_LIB.impl("conv_depthwise", _conv_depthwise, "CompositeExplicitAutograd")
torch.library.register_fake("torchkiln::conv_depthwise", _conv_depthwise_fake, lib=_LIB)

CONV_CHANNELS_LAST = torch.ops.torchkiln.conv_channels_last.default
CONV1X1_CHANNELS_LAST = torch.ops.torchkiln.conv1x1_channels_last.default
#: a weight's taps, kept for later calls: no kernel's output may be written over them
CONV_TAPS = keep_result(torch.ops.torchkiln.conv_taps.default)
CONV_DIRECT = torch.ops.torchkiln.conv_direct.default
CONV_DEPTHWISE = torch.ops.torchkiln.conv_depthwise.default
#: the wrapper calls these operators' functions directly (no dispatcher round trip)
DIRECT_CALLS = {
    CONV_CHANNELS_LAST: _conv_channels_last,
    CONV1X1_CHANNELS_LAST: _conv1x1_channels_last,
    CONV_TAPS: _conv_taps,
    CONV_DIRECT: _conv_direct,
    CONV_DEPTHWISE: _conv_depthwise,
}

#: 1x1 convolutions of these dtypes run as matrix multiplies; a float32 one stays cuDNN's,
#: which by default computes in TF32 (torch.backends.cudnn.allow_tf32) where a float32 matrix
#: multiply does not
_MATMUL_DTYPES = (torch.float16, torch.bfloat16)


def _is_pointwise_conv(conv: fx.Node) -> bool:
    """A 1x1 convolution of stride 1, no padding and one group, of a 16-bit dtype."""
    _x, w, _b, stride, padding, _dilation, _t, _op, groups = conv.args
    weight = _val(w)
    return (
        tuple(weight.shape[2:]) == (1, 1)
        and list(stride) == [1, 1]
        and list(padding) == [0, 0]
        and groups == 1
        and weight.dtype in _MATMUL_DTYPES
    )


def _why_not(conv: fx.Node) -> str | None:
    """Why ``conv`` (an ``aten.convolution``, or a ``convolution_backward``: its input, weight
    and ``transposed`` flag one place later) does not run channels-last, or None."""
    at = 0 if conv.target is aten.convolution.default else 1
    x, w = _val(conv.args[at]), _val(conv.args[at + 1])
    transposed = conv.args[at + 6]
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or not isinstance(w, torch.Tensor):
        return "not a 2-D convolution"
    if transposed:
        return "a transposed convolution"
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {x.dtype}"
    return None


#: the most taps a depthwise convolution is generated code for, by default. The
#: H200 against cuDNN with the bias and activation after it, shape by shape
#: (``benchmarks/gpu_direct_conv.py``, session 16): in 16-bit every 3x3 wins (1.0-2.4x), 5x5
#: mostly (0.8-2.5x: cuDNN is faster at 240-672 channels of 14x14 to 28x28 at stride 1), 7x7
#: loses (0.5-0.65x, ConvNeXt's); summed over each model's shapes, session 17's direct kernels
#: took MobileNetV3's 1.32 ms of cuDNN + activation to 1.15, EfficientNet-B0's 2.09 to 1.81.
#: In float32 cuDNN is slower and every shape wins alone, 7x7 included (1.4-1.9x), but
#: ConvNeXt-tiny's step with its 18 direct 7x7 convolutions fused into the layer norms after
#: them did not move (18.83 ms in session 15, 18.85 in session 16) while its compile time went
#: from 2.7 to 11.2 s: 5x5 is the limit for every dtype.
_DIRECT_TAPS = 25
#: the dtypes a direct convolution is generated for (it sums in float32)
_DIRECT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _direct_taps(conv: fx.Node, limit: int | None) -> int | None:
    """The taps (multiply-adds per output element) of ``conv`` (an ``aten.convolution`` that
    runs channels-last) when it is to be a direct convolution: depthwise (one input channel per
    group; a channel multiplier is fine), static sizes, no output padding, and at most ``limit``
    taps (None: ``_DIRECT_TAPS``). A convolution that sums over input channels (a
    stem's 3, a grouped one's) is a matrix multiply for cuDNN's tensor cores: generated, a
    3-channel stem ran 0.7-1.1x cuDNN's speed."""
    x, w = _val(conv.args[0]), _val(conv.args[1])
    if x.dtype not in _DIRECT_DTYPES or list(conv.args[7]) != [0, 0]:
        return None
    if not all(isinstance(s, int) for s in (*x.shape, *w.shape)) or w.shape[1] != 1:
        return None
    taps = int(w.shape[2] * w.shape[3])
    return taps if taps <= (_DIRECT_TAPS if limit is None else limit) else None


def _direct(graph: fx.Graph, conv: fx.Node, taps: int) -> tuple[fx.Node, str]:
    """``conv`` (no bias) as ``conv_direct`` of its input, in whatever layout it comes (a
    stem's NCHW image is not copied first), and of its weight's taps; and the log's words."""
    x, w, _b, stride, padding, dilation, _transposed, _output_padding, groups = conv.args
    weight_taps = graph.call_function(CONV_TAPS, (w,))
    _fake_meta(weight_taps)
    args = (x, weight_taps, list(stride), list(padding), list(dilation), groups)
    return graph.call_function(CONV_DIRECT, args), (
        f"direct convolution ({taps} taps, generated code)"
    )


def _is_depthwise(conv: fx.Node) -> bool:
    """``conv`` (an ``aten.convolution``, or a ``convolution_backward``: its arguments one place
    later) is what ``torchkiln::conv_depthwise`` computes: one output channel per input channel,
    stride and dilation 1, no output padding, static sizes, a dtype the kernels sum in
    float32."""
    at = 0 if conv.target is aten.convolution.default else 1
    x, w, _b, stride, _padding, dilation, _t, output_padding, groups = conv.args[at : at + 9]
    xv, wv = _val(x), _val(w)
    return (
        xv.dtype in _DIRECT_DTYPES
        and all(isinstance(s, int) for s in (*xv.shape, *wv.shape))
        and groups == xv.shape[1] == wv.shape[0]
        and wv.shape[1] == 1
        and list(stride) == [1, 1]
        and list(dilation) == [1, 1]
        and list(output_padding) == [0, 0]
    )


def use_channels_last(
    gm: fx.GraphModule, direct_taps: int | None = None, depthwise: bool = False
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose 2-D convolutions run channels-last, and the log of decisions; a
    depthwise one of at most ``direct_taps`` taps (None: ``_DIRECT_TAPS``) becomes a direct
    convolution (``torchkiln::conv_direct``, generated code: lowering/convolution.py); with
    ``depthwise``, a larger one of stride 1 becomes ``torchkiln::conv_depthwise`` (the kernel a
    code generator registered for the device, ``register_depthwise_kernel``), its bias with it."""
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    if not convs:
        return gm, ()
    copy = layout_copy(gm, convs)
    if isinstance(copy, tuple):
        return gm, copy
    graph, copies = copy.graph, copy.copies
    log: list[str] = []
    changed = False
    for conv in [copies[c] for c in convs]:
        reason = _why_not(conv)
        if reason is not None:
            log.append(f"{conv.name}: aten.convolution kept in NCHW ({reason})")
            continue
        x, w, b, stride, padding, dilation, _transposed, _output_padding, groups = conv.args
        taps = _direct_taps(conv, direct_taps)
        with graph.inserting_before(conv):
            if taps is not None:
                new, how = _direct(graph, conv, taps)
            else:
                if not _val(x).is_contiguous(memory_format=torch.channels_last):
                    x = graph.call_function(
                        aten.clone.default, (x,), {"memory_format": torch.channels_last}
                    )
                    _fake_meta(x)
                if depthwise and _is_depthwise(conv):
                    weight_taps = graph.call_function(CONV_TAPS, (w,))
                    _fake_meta(weight_taps)
                    # the bias with it: the kernel adds it
                    new = graph.call_function(CONV_DEPTHWISE, (x, weight_taps, b, list(padding)))
                    how, b = "depthwise convolution (the code generator's kernel)", None
                elif _is_pointwise_conv(conv):
                    new = graph.call_function(CONV1X1_CHANNELS_LAST, (x, w))
                    how = "1x1 convolution as a matrix multiply of channels-last pixels"
                else:
                    args = (x, w, list(stride), list(padding), list(dilation), groups)
                    new = graph.call_function(CONV_CHANNELS_LAST, args)
                    how = "convolution channels-last (weight converted once)"
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
        log.append(f"{conv.name}: {how}")
    if not changed:
        return gm, tuple(log)
    return finish_layout(gm, copy, convs, log)


# --- training graphs -------------------------------------------------------------------------

_CONV_BACKWARD = aten.convolution_backward.default


def adopt_input_strides(
    gm: fx.GraphModule, example_inputs: list, count: int
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """``gm`` compiled against the strides of its first ``count`` example inputs, where they
    differ from the traced ones (contract C2's ``meta["saved_inputs"]``: a backward graph reads
    the values its forward saved, which a channels-last forward returns channels-last). The
    placeholders take the inputs' strides, meta values are propagated again (loop-ir realizes
    buffers and extern results with them), and the outputs keep their traced strides (a copy
    where one changed). ``gm`` itself is returned when nothing differs."""
    if not _static_inputs(gm.graph):
        # a forward of symbolic sizes keeps its traced layouts (use_channels_last* refuse it)
        return gm, ()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"][:count]
    differ = [
        (n, real)
        for n, real in zip(placeholders, example_inputs)
        if isinstance(real, torch.Tensor)
        and isinstance(v := _val(n), torch.Tensor)
        and not same_strides(v, real)
    ]
    if not differ:
        return gm, ()
    graph, copies = copied_graph(gm)
    output = next(n for n in graph.nodes if n.op == "output")
    before = _output_values(output)
    # an as_strided reads memory order: one that only restrides its input reads the input
    # (a forward's restride the partitioner recomputes here), any other must read what it was
    # traced with
    _drop_restrides(graph)
    strided = {
        n: _val(n.args[0]) for n in graph.nodes if n.target in _STORAGE_OPS | _STORAGE_WRITES
    }
    mode = FakeTensorMode()
    for n, real in differ:
        with mode:
            copies[n].meta["val"] = torch.empty_strided(
                tuple(real.shape), tuple(real.stride()), dtype=real.dtype, device=real.device
            )
    _propagate_meta(graph, mode)
    for n, traced in strided.items():
        if not same_strides(traced, _val(n.args[0])):
            raise LoweringError(
                f"{n.name}: an as_strided view of a value whose strides changed with the "
                "saved inputs' (it would read other elements)"
            )
    if not _keep_output_layouts(graph, output, before):
        raise LoweringError("a non-contiguous output would change strides with its saved inputs")
    graph.lint()
    return fx.GraphModule(gm, graph), tuple(
        f"{copies[n].name}: compiled for the saved value's strides {tuple(real.stride())}"
        for n, real in differ
    )


def _layout_args(node: fx.Node) -> tuple[int, ...]:
    """The positions of ``node``'s activation operands made channels-last: a convolution's
    input; a convolution backward's output gradient and input."""
    return (0,) if node.target is aten.convolution.default else (0, 1)


def _to_channels_last(
    graph: fx.Graph, node: fx.Node, arg: Any, made: dict[fx.Node, fx.Node] | None = None
) -> Any:
    """``arg`` as a channels-last value before ``node``: a clone, which loop-ir fuses into the
    kernel that produces ``arg`` (a cast weight, a pointwise gradient). ``made`` (arg -> its
    clone): one clone per value, however many convolutions read it (a block's input read by
    its body and its shortcut)."""
    if not isinstance(arg, fx.Node) or _val(arg).is_contiguous(memory_format=torch.channels_last):
        return arg
    if made is not None and arg in made:
        return made[arg]
    with graph.inserting_before(node):
        clone = graph.call_function(
            aten.clone.default, (arg,), {"memory_format": torch.channels_last}
        )
        _fake_meta(clone)
    if made is not None:
        made[arg] = clone
    return clone


def _save_the_clones(output: fx.Node, free_tail: int, made: dict[fx.Node, fx.Node]) -> list[str]:
    """Each of the forward's saved values (its last ``free_tail`` outputs) that a convolution
    reads through a channels-last clone is saved as that clone: the backward's
    ``convolution_backward`` reads the same operand, and now gets it channels-last (it was
    given the traced NCHW value, and converted it again: ATen's own copy of each cast weight,
    loop-ir's of the input). The value itself is then read by the clone alone, whose copy
    fuses into the kernel making it (autocast's cast of a weight or of the input writes
    channels-last at once). Graph inputs stay saved as they are: saving a clone of one would
    keep a second copy alive until the backward. Returns the log lines."""
    if not free_tail or isinstance(output.args[0], fx.Node):
        return []
    outs = list(output.args[0])
    log = []
    for i in range(len(outs) - free_tail, len(outs)):
        node = outs[i]
        if isinstance(node, fx.Node) and node.op != "placeholder" and node in made:
            outs[i] = made[node]
            log.append(f"{node.name}: saved for the backward channels-last")
    output.args = (tuple(outs),)
    return log


def _graph_taps(graph: fx.Graph, conv: fx.Node, weight: Any, flip: bool) -> fx.Node:
    """``weight``'s taps computed in the graph before ``conv`` (a training step's weight changes
    every step: no copy is kept, and the copy fuses into the kernel casting the weight), with
    ``flip`` the kernel turned half a circle (the input gradient's taps)."""
    with graph.inserting_before(conv):
        taps = graph.call_function(aten.permute.default, (weight, [1, 2, 3, 0]))
        _fake_meta(taps)
        if flip:
            taps = graph.call_function(aten.flip.default, (taps, [1, 2]))
            _fake_meta(taps)
        taps = graph.call_function(
            aten.clone.default, (taps,), {"memory_format": torch.contiguous_format}
        )
        _fake_meta(taps)
    return taps


def _depthwise_training(graph: fx.Graph, conv: fx.Node, limit: int | None) -> str | None:
    """``conv`` (channels-last already) through ``torchkiln::conv_depthwise`` where it is a
    depthwise convolution of stride 1 with more taps than ``limit`` (None: ``_DIRECT_TAPS``):
    a forward with its bias; a backward's input gradient, the convolution of the output gradient
    by the flipped taps with padding ``k - 1 - p`` (the input's size again), its weight gradient
    left to the ``convolution_backward`` (cuDNN's; erased where it has nothing left to compute).
    The log's words, or None."""
    forward = conv.target is aten.convolution.default
    at = 0 if forward else 1
    w, padding = conv.args[at + 1], list(conv.args[at + 4])
    kernel = tuple(_val(w).shape[2:])
    if not _is_depthwise(conv) or kernel[0] * kernel[1] <= (
        _DIRECT_TAPS if limit is None else limit
    ):
        return None
    if forward:
        taps = _graph_taps(graph, conv, w, flip=False)
        with graph.inserting_before(conv):
            new = graph.call_function(CONV_DEPTHWISE, (conv.args[0], taps, conv.args[2], padding))
            _fake_meta(new)
        conv.replace_all_uses_with(new)
        graph.erase_node(conv)
        return "depthwise convolution (the code generator's kernel)"
    mask = list(conv.args[10])
    if not mask[0] or not all(0 <= p < k for p, k in zip(padding, kernel)):
        return None
    taps = _graph_taps(graph, conv, w, flip=True)
    flipped = [k - 1 - p for p, k in zip(padding, kernel)]
    with graph.inserting_before(conv):
        grad_input = graph.call_function(CONV_DEPTHWISE, (conv.args[0], taps, None, flipped))
        _fake_meta(grad_input)
    for use in [u for u in conv.users if u.target is operator.getitem and u.args[1] == 0]:
        use.replace_all_uses_with(grad_input)
        graph.erase_node(use)
    mask[0] = False
    if any(mask) or conv.users:
        conv.args = (*conv.args[:10], mask, *conv.args[11:])
    else:
        graph.erase_node(conv)
    return (
        "input gradient a depthwise convolution by the flipped taps (the code generator's kernel)"
    )


def use_channels_last_training(
    gm: fx.GraphModule,
    free_tail: int = 0,
    depthwise: bool = False,
    direct_taps: int | None = None,
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` (a training forward or backward graph) whose 2-D convolutions and
    convolution backwards read channels-last activations, and the log of decisions.

    ``aten.convolution`` and ``aten.convolution_backward`` stay (cuDNN picks NHWC kernels when
    an operand is channels-last, and returns channels-last results); what changes is what they
    read: their activations (input; output gradient and input) are made channels-last with a
    clone where they are not, and so is a weight that the graph computes (autocast's bfloat16
    cast of a parameter: the clone fuses into the cast's kernel), so cuDNN transposes nothing.
    The layout then flows through the pointwise kernels and batch-norm reductions between them.
    Outputs keep their traced strides, except the last ``free_tail`` (contract C2's
    ``meta["free_saved_strides"]``: values saved for the backward graph, which is compiled
    against what the forward returns, ``adopt_input_strides``).

    With ``depthwise``, a depthwise convolution of stride 1 with more taps than ``direct_taps``
    (None: ``_DIRECT_TAPS``) runs as ``torchkiln::conv_depthwise``, as in inference, and so does
    its backward's input gradient (``_depthwise_training``)."""
    convs = [n for n in gm.graph.nodes if n.target in (aten.convolution.default, _CONV_BACKWARD)]
    if not convs:
        return gm, ()
    copy = layout_copy(gm, convs)
    if isinstance(copy, tuple):
        return gm, copy
    graph, copies = copy.graph, copy.copies
    log: list[str] = []
    changed = False
    made: dict[fx.Node, fx.Node] = {}
    for conv in [copies[c] for c in convs]:
        reason = _why_not(conv)
        if reason is not None:
            log.append(f"{conv.name}: {conv.target.__name__} kept in NCHW ({reason})")
            continue
        args = list(conv.args)
        for i in _layout_args(conv):
            args[i] = _to_channels_last(graph, conv, args[i], made)
        weight = 1 if conv.target is aten.convolution.default else 2
        if isinstance(args[weight], fx.Node) and args[weight].op != "placeholder":
            args[weight] = _to_channels_last(graph, conv, args[weight], made)
        conv.args = tuple(args)
        changed = True
        name = f"{conv.name}: {conv.target.__name__}"
        how = _depthwise_training(graph, conv, direct_taps) if depthwise else None
        log.append(f"{name}: {how}" if how else f"{name} reads channels-last")
    if not changed:
        return gm, tuple(log)
    log += _save_the_clones(copy.output, free_tail, made)
    return finish_layout(gm, copy, convs, log, free_tail=free_tail)
