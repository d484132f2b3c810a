"""CPU linear layers through oneDNN (mkldnn) where it is measured to pay: a prepacked weight and
the epilogue (bias, activation, or a residual add) applied inside the GEMM call.

``use_mkldnn_linears(gm, mode)`` is a pass over the ATen graph before lowering, beside
``mkldnn.use_mkldnn_convolutions`` (whose helpers it shares). A linear layer reaches loop-ir as
``addmm(b, x, permute(w, [1, 0]))`` or ``mm(x, permute(w, [1, 0]))`` (GPT-2's ``Conv1D``, whose
weight is stored (in, out): ``addmm(b, x, w)``), often followed by a ``view`` back to the
input's leading dims. When ``w`` is a contiguous 2-D float32 graph input (a parameter, frozen or
not), the call and its sole consumer can become one
``torchkiln.mkldnn_linear(x, w, b, attr, pack_weight, weight_in_out)``:

- ``attr`` is the activation oneDNN applies as a post-op: ``relu``, ``gelu`` (the exact, erf
  form, which reaches loop-ir decomposed: ``v * 0.5 * (1 + erf(v * 0.7071067811865476))``) or
  ``swish`` (SiLU, decomposed as ``v * sigmoid(v)``);
- or the consumer is a residual add of a tensor of the result's shape:
  ``torchkiln.mkldnn_linear_add(x, other, w, b, pack_weight, weight_in_out)`` (oneDNN's binary post-op);
- the weight is reordered once into oneDNN's blocked layout and reused while the tensor is
  unchanged (``_weight``: keyed by the tensor, its version counter, data pointer and the
  row count; a parameter updated in place or replaced is packed again before the next call; a
  tensor is packed the second time it is seen, so a weight that is a new tensor on every call
  is never reordered).

Which call is faster depends on the shape: oneDNN's call costs ~15 us more than MKL's ``addmm``
on the 2-core CPU, which dominates below ~100k multiply-adds per output tile row set (the zoo's
64x64x256 layers: addmm 22-33 us, oneDNN 37-49 us), while at transformer sizes the packed weight
and the fused epilogue win (512x512x128 + GELU: 855 us against 738 us, one thread). So in the
default mode, ``"measure"``, each distinct (rows, in, out, bias, epilogue) is timed once per
process at compile time on random data, interleaved, the minimum of several runs: ``addmm`` plus
the activation as its own pass (what the kernel after the GEMM does) against the fused oneDNN
call; oneDNN is taken only when it is at least 5% faster. A residual add is charged nothing on
the ``addmm`` side (the scheduler fuses it into the kernel after, usually the next layer norm).
GEMMs below ``_MEASURE_MIN_FLOPS`` keep ``addmm`` untimed (oneDNN's fixed cost is
more than it could save; small graphs then compile to the same calls every run), and GEMMs above
``_MEASURE_MAX_FLOPS`` are not timed (a single run would cost seconds of compile
time): there oneDNN with the packed weight was never slower. ``"always"`` and ``"never"`` skip
the measurement (tests, and turning the pass off).

Every linear's decision, with the timings or the reason it stays ``addmm``, is in the pass's log
(``CompiledGraph.linear_log``). Without mkldnn in the torch build, for other dtypes, symbolic
sizes, weights computed in the graph, the pass changes nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.weak import WeakIdKeyDictionary

from .mkldnn import (
    _LIB,
    _fake_meta,
    _propagate_meta,
    _static_inputs,
    _val,
    bias_vector,
    copied_graph,
    gemm_operands,
    mkldnn_available,
    time_min,
)

aten = torch.ops.aten

_LIB.define(
    "mkldnn_linear(Tensor x, Tensor weight, Tensor? bias, str attr, bool pack_weight, "
    "bool weight_in_out) -> Tensor"
)
_LIB.define(
    "mkldnn_linear_add(Tensor x, Tensor other, Tensor weight, Tensor? bias, bool pack_weight, "
    "bool weight_in_out) -> Tensor"
)

MODES = ("measure", "always", "never")
#: oneDNN's name of each activation post-op -> its ``algorithm`` argument
_ALGORITHM = {"none": "", "relu": "", "gelu": "none", "swish": ""}
#: 2*M*K*N below which oneDNN is not timed and not taken: its fixed cost (~15 us a call on the
#: 2-core CPU) is more than anything it saves there (a GEMM this size takes ~100 us with addmm);
#: it also keeps small graphs' calls the same from run to run
_MEASURE_MIN_FLOPS = 8e6
#: 2*M*K*N above which a GEMM is not timed at compile time (oneDNN with a packed weight is
#: taken; without one, in a training graph, ``addmm`` is kept)
_MEASURE_MAX_FLOPS = 4e9
_GELU_HALF, _GELU_SQRT1_2 = 0.5, 1.0 / math.sqrt(2.0)

#: weight tensor -> {(weight_in_out, rows): ((version, data_ptr), prepacked weight)}; entries die
#: with their tensor
_PACKED: WeakIdKeyDictionary = WeakIdKeyDictionary()
#: (M, K, N, bias, epilogue, threads, packed) -> (use oneDNN, addmm seconds, oneDNN seconds);
#: measured once per process
_DECISIONS: dict[tuple[Any, ...], tuple[bool, float, float]] = {}


def _weight(weight: torch.Tensor, rows: int, pack: bool, in_out: bool) -> torch.Tensor:
    """The (out, in) weight oneDNN takes: ``weight`` itself, or its transpose when it is stored
    (in, out) (GPT-2's ``Conv1D``); with ``pack``, in oneDNN's blocked layout, reordered once
    per change of the tensor (version counter, data pointer) or of the row count it was packed
    for. A tensor seen for the first time is used unpacked: a weight that is a new tensor on
    every call (not a parameter) then never pays for a reorder it cannot reuse."""
    logical = weight.t() if in_out else weight
    if not pack:
        return logical
    # One tensor can be packed in both orientations: a training forward reads a weight as (out,
    # in) and its backward reads the same tensor transposed. Each (orientation, rows) has its own
    # packed copy; the (version, data pointer) stamp says when it is stale.
    layout, stamp = (in_out, rows), (weight._version, weight.data_ptr())
    packs = _PACKED.get(weight)
    if packs is None:
        _PACKED[weight] = {}  # seen once: pack if it comes again
        return logical
    hit = packs.get(layout)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    with torch.no_grad():
        packed = torch.ops.mkldnn._reorder_linear_weight(logical.detach(), rows)
    packs[layout] = (stamp, packed)
    return packed


def _mkldnn_linear(x, weight, bias, attr, pack_weight, weight_in_out):
    weight = _weight(weight, x.shape[0], pack_weight, weight_in_out)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], _ALGORITHM[attr])


def _out_features(weight, weight_in_out):
    return weight.shape[1] if weight_in_out else weight.shape[0]


def _mkldnn_linear_fake(x, weight, bias, attr, pack_weight, weight_in_out):
    return x.new_empty((x.shape[0], _out_features(weight, weight_in_out)))


def _mkldnn_linear_add(x, other, weight, bias, pack_weight, weight_in_out):
    """``linear(x) + other``: the residual add as oneDNN's binary post-op (``other`` is read as
    the (rows, out) matrix it is a view of, copied first when its layout is not that)."""
    other = other.reshape(x.shape[0], _out_features(weight, weight_in_out))
    if not other.is_contiguous():
        other = other.contiguous()
    weight = _weight(weight, x.shape[0], pack_weight, weight_in_out)
    return torch.ops.mkldnn._linear_pointwise.binary(x, other, weight, bias, "add")


def _mkldnn_linear_add_fake(x, other, weight, bias, pack_weight, weight_in_out):
    return x.new_empty((x.shape[0], _out_features(weight, weight_in_out)))


_LIB.impl("mkldnn_linear", _mkldnn_linear, "CPU")
torch.library.register_fake("torchkiln::mkldnn_linear", _mkldnn_linear_fake, lib=_LIB)
_LIB.impl("mkldnn_linear_add", _mkldnn_linear_add, "CPU")
torch.library.register_fake("torchkiln::mkldnn_linear_add", _mkldnn_linear_add_fake, lib=_LIB)

MKLDNN_LINEAR = torch.ops.torchkiln.mkldnn_linear.default
MKLDNN_LINEAR_ADD = torch.ops.torchkiln.mkldnn_linear_add.default
#: the wrapper calls these operators' CPU functions directly (no dispatcher round trip)
DIRECT_CALLS = {MKLDNN_LINEAR: _mkldnn_linear, MKLDNN_LINEAR_ADD: _mkldnn_linear_add}


def _is_scalar(a: Any, value: float) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a - value) < 1e-12


def _sole_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _gelu(y: fx.Node) -> list[fx.Node] | None:
    """The nodes of ``y * 0.5 * (1 + erf(y * sqrt(1/2)))`` (torch's exact GELU decomposed), the
    last one last, when they are all of ``y``'s users; else None."""
    users = list(y.users)
    if len(users) != 2 or any(u.target is not aten.mul.Tensor or u.kwargs for u in users):
        return None
    half = next((u for u in users if _is_scalar(u.args[1], _GELU_HALF)), None)
    scale = next((u for u in users if u is not half and _is_scalar(u.args[1], _GELU_SQRT1_2)), None)
    if half is None or scale is None or half.args[0] is not y or scale.args[0] is not y:
        return None
    erf = _sole_user(scale)
    one = _sole_user(erf) if erf is not None and erf.target is aten.erf.default else None
    if (
        one is None
        or one.target is not aten.add.Tensor
        or one.kwargs
        or one.args[0] is not erf
        or not _is_scalar(one.args[1], 1.0)
    ):
        return None
    out = _sole_user(one)
    if (
        out is None
        or out is not _sole_user(half)
        or out.target is not aten.mul.Tensor
        or set(out.args) != {half, one}
    ):
        return None
    return [half, scale, erf, one, out]


def _epilogue(y: fx.Node) -> tuple[str, fx.Node | None, list[fx.Node], str]:
    """(oneDNN post-op, residual operand, replaced nodes, reason when none) for the consumers
    of the linear's result ``y`` (the GEMM, or its view to the input's leading dims)."""
    users = list(y.users)
    if not users:
        return "none", None, [], "no consumer"
    if len(users) == 1 and users[0].target is aten.relu.default:
        return "relu", None, users, ""
    if (gelu := _gelu(y)) is not None:
        return "gelu", None, gelu, ""
    if len(users) == 2:
        sig = next((u for u in users if u.target is aten.sigmoid.default), None)
        mul = next((u for u in users if u.target is aten.mul.Tensor), None)
        if (
            sig is not None
            and mul is not None
            and list(sig.users) == [mul]
            and set(mul.args) == {y, sig}
            and not mul.kwargs
        ):
            return "swish", None, [sig, mul], ""
    if len(users) == 1 and users[0].target is aten.add.Tensor and not users[0].kwargs:
        add = users[0]
        others = [a for a in add.args if a is not y]
        other, yv = (_val(others[0]), _val(y)) if len(others) == 1 else (None, None)
        if (
            isinstance(others[0] if others else None, fx.Node)
            and isinstance(other, torch.Tensor)
            and other.shape == yv.shape
            and other.dtype == yv.dtype
        ):
            return "add", others[0], [add], ""
    if len(users) > 1:
        return (
            "none",
            None,
            [],
            (
                f"its result has {len(users)} consumers (an epilogue is fused "
                "only into a sole consumer)"
            ),
        )
    return (
        "none",
        None,
        [],
        (
            f"its consumer {users[0].target} is not an epilogue oneDNN applies "
            "(relu, gelu, silu, a residual add)"
        ),
    )


def _linear_parts(node: fx.Node, placeholders: set[fx.Node]) -> tuple[Any, ...] | str:
    """(x, weight, bias, weight stored (in, out)) of an ``addmm``/``mm`` that is a linear layer
    of a weight graph input, or the reason it is not one oneDNN takes."""
    operands = gemm_operands(node)
    if isinstance(operands, str):
        return operands
    bias, x, wt = operands
    in_out = bias is not None and wt in placeholders  # GPT-2's Conv1D: addmm(b, x, w), w (in, out)
    if not in_out and not (
        isinstance(wt, fx.Node)
        and wt.target in (aten.permute.default, aten.t.default)
        and (wt.target is aten.t.default or list(wt.args[1]) == [1, 0])
    ):
        return "its right operand is not a transposed weight"
    w = wt if in_out else wt.args[0]
    if w not in placeholders:
        return "its weight is computed in the graph (only a graph input is prepacked)"
    xv, wv, yv = _val(x), _val(w), _val(node)
    if not all(isinstance(v, torch.Tensor) for v in (xv, wv, yv)):
        return "no tensor meta value"
    if any(v.dtype != torch.float32 or v.device.type != "cpu" for v in (xv, wv, yv)):
        return f"{yv.dtype} on {yv.device.type} (float32 on the CPU only)"
    if not wv.is_contiguous():
        return "its weight is not contiguous"
    if bias is not None and not bias_vector(bias, wv.shape[1 if in_out else 0], torch.float32):
        return "its bias is not a vector of the output width"
    return x, w, bias, in_out


_EAGER_EPILOGUE = {
    "none": None,
    "add": None,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "swish": torch.nn.functional.silu,
}


def _measured(
    m: int, k: int, n: int, bias: bool, epilogue: str, pack: bool = True
) -> tuple[bool, float, float]:
    """(oneDNN is faster, addmm seconds, oneDNN seconds) for this GEMM and epilogue, oneDNN's
    weight packed or not, measured once per process on real tensors (outside any fake or
    dispatch mode the caller compiles under); a oneDNN call that fails here is never chosen."""
    key = (m, k, n, bias, epilogue, torch.get_num_threads(), pack)
    if key not in _DECISIONS:
        try:
            _DECISIONS[key] = _measure(m, k, n, bias, epilogue, pack)
        except RuntimeError:
            _DECISIONS[key] = (False, math.nan, math.nan)
    return _DECISIONS[key]


def _measure(
    m: int, k: int, n: int, bias: bool, epilogue: str, pack: bool = True
) -> tuple[bool, float, float]:
    with torch.no_grad(), _disable_current_modes():
        x, w = torch.randn(m, k), torch.randn(n, k)
        b = torch.randn(n) if bias else None
        other = torch.randn(m, n)
        wt, act = w.t(), _EAGER_EPILOGUE[epilogue]

        def base():
            y = torch.addmm(b, x, wt) if bias else torch.mm(x, wt)
            return act(y) if act is not None else y

        _weight(w, m, pack, False)  # seen once: with pack, the calls below use it packed
        if epilogue == "add":

            def fused():
                return _mkldnn_linear_add(x, other, w, b, pack, False)
        else:

            def fused():
                return _mkldnn_linear(x, w, b, epilogue, pack, False)

        times = time_min({"addmm": base, "onednn": fused})
    return times["onednn"] < 0.95 * times["addmm"], times["addmm"], times["onednn"]


def use_mkldnn_linears(
    gm: fx.GraphModule, mode: str = "measure", pack: bool = True
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose linear layers of graph-input weights go through oneDNN where
    ``mode`` says so ("measure": where timing says it is faster, "always", "never"), and the
    log of decisions (one line per linear layer). ``pack``: oneDNN reads each weight in its
    blocked layout, reordered when the weight changes; a training graph passes False, since
    its optimizer changes every weight every step (the reorder then ran on every call: GPT-2's
    154 MB vocabulary weight and twelve 9 MB MLP weights each step, the forward at full size
    on the CPU 11% slower than eager's, session 34)."""
    if mode not in MODES:
        raise ValueError(f"mkldnn_linear must be one of {MODES}, got {mode!r}")
    gemms = [n for n in gm.graph.nodes if n.target in (aten.addmm.default, aten.mm.default)]
    if not gemms or mode == "never":
        return gm, ()
    if not mkldnn_available():
        return gm, tuple(
            f"{g.name}: {g.target} kept (torch was built without mkldnn)" for g in gemms
        )
    if not _static_inputs(gm.graph):
        return gm, tuple(
            f"{g.name}: {g.target} kept (graph inputs of symbolic size)" for g in gemms
        )
    graph, copies = copied_graph(gm)
    _propagate_meta(graph, FakeTensorMode())
    placeholders = {n for n in graph.nodes if n.op == "placeholder"}
    log: list[str] = []
    changed = False
    for gemm in [copies[g] for g in gemms]:
        parts = _linear_parts(gemm, placeholders)
        if isinstance(parts, str):
            log.append(f"{gemm.name}: {gemm.target} kept ({parts})")
            continue
        x, w, b, in_out = parts
        # the linear's result as the model sees it: the GEMM, or its view to the leading dims
        view = _sole_user(gemm)
        y = (
            view
            if view is not None and view.target in (aten.view.default, aten._unsafe_view.default)
            else gemm
        )
        attr, other, replaced, why = _epilogue(y)
        m, k = _val(x).shape
        n = _val(w).shape[1 if in_out else 0]
        what = (
            f"{m}x{k}x{n}"
            + (" + bias" if b is not None else "")
            + (f" + {attr}" if attr != "none" else "")
        )
        flops = 2 * m * k * n
        if mode == "measure" and flops < _MEASURE_MIN_FLOPS:
            log.append(
                f"{gemm.name}: {gemm.target} kept ({what}: {flops / 1e6:.1f} MFLOP, below "
                f"{_MEASURE_MIN_FLOPS / 1e6:.0f} MFLOP: oneDNN's fixed cost outweighs what it saves)"
            )
            continue
        if mode == "measure" and flops > _MEASURE_MAX_FLOPS and not pack:
            log.append(
                f"{gemm.name}: {gemm.target} kept ({what}: {flops / 1e9:.1f} GFLOP, not timed; "
                "oneDNN's lead there is its packed weight, which a training step would reorder "
                "on every call)"
            )
            continue
        if mode == "measure" and flops <= _MEASURE_MAX_FLOPS:
            faster, t_base, t_dnn = _measured(m, k, n, b is not None, attr, pack)
            timing = (
                f"addmm {t_base * 1e6:.0f} us, oneDNN {t_dnn * 1e6:.0f} us"
                if not math.isnan(t_dnn)
                else "oneDNN's call failed when timed"
            )
            if not faster:
                log.append(
                    f"{gemm.name}: {gemm.target} kept ({what}: {timing}; oneDNN is not 5% faster)"
                )
                continue
        else:
            timing = "not measured" if mode == "measure" else f"mode {mode!r}"
        with graph.inserting_before(replaced[0] if replaced else gemm):
            if other is not None:
                new = graph.call_function(MKLDNN_LINEAR_ADD, (x, other, w, b, pack, in_out))
            else:
                new = graph.call_function(MKLDNN_LINEAR, (x, w, b, attr, pack, in_out))
            _fake_meta(new)
            last = replaced[-1] if replaced else y
            result = new
            if y is not gemm:
                result = graph.call_function(aten.view.default, (new, list(_val(y).shape)))
                _fake_meta(result)
        last.replace_all_uses_with(result)
        transpose = [] if in_out else [gemm.args[-1]]
        for node in reversed([*transpose, gemm, *([y] if y is not gemm else []), *replaced]):
            if not node.users:  # the weight's transpose goes last: nothing reads it now
                graph.erase_node(node)
        changed = True
        fused, why = (" fused", "") if attr != "none" else ("", f"; epilogue not fused: {why}")
        packed = "prepacked weight" if pack else "weight not packed"
        log.append(f"{gemm.name}: oneDNN linear {what}{fused}, {packed} ({timing}){why}")
    if not changed:
        return gm, tuple(log)
    # the module is made once the graph is final: making it writes its Python code, as
    # recompile() does (once instead of twice)
    new_gm = fx.GraphModule(gm, graph)
    graph.lint()
    return new_gm, tuple(log)
