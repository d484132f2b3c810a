"""GPU linear layers with their activation applied in cuBLASLt's epilogue.

A linear layer followed by ReLU or by the tanh form of GELU reaches loop-ir as an ``addmm`` (or
an ``mm``, without a bias), a ``view`` back to the input's leading dims, and the activation's
pointwise ops. On a GPU the product is a cuBLAS call and the activation a generated kernel of
its own whenever what reads it is another product: GPT-2's MLP (``Conv1D`` then ``gelu_new``,
written out with ``tanh``) and T5's (``wi`` without a bias, ``relu``) write the (tokens, 3072)
product, read it back, and write the activation, for the next product to read. ATen's
``_addmm_activation(bias, x, w, use_gelu=...)`` applies the bias and the activation inside the
GEMM (cuBLASLt's ``RELU_BIAS`` / ``GELU_BIAS`` epilogues, whose GELU is the tanh form): one
write of the result and no second pass.

``use_cublas_epilogues(gm, mode)`` is a pass over the ATen graph before lowering, beside
``pad_mm.pad_matmuls`` (it runs first, and only on products whose sizes are aligned already,
which that pass leaves alone). The activation is recognised by what it computes, not by its
ops' spelling (``gelu(approximate="tanh")`` decomposes into ``v * v * v`` where ``gelu_new``
has ``pow(v, 3)``): the pointwise ops after the product that read only it and each other, whose
values nothing else reads, evaluated in float64 on probe values, must equal ``relu`` or the
tanh GELU. A training forward whose backward keeps the product (GELU's input) has another
reader and is left as it is; ReLU's backward keeps the activation's result, which the fused
call still makes.

A product without a bias gets a zero bias (a generated fill of N values). In the default mode,
``"measure"``, each distinct (M, K, N, dtype, layouts, bias, activation) is timed once per
process at compile time on random tensors of the graph's sizes and strides, interleaved, the
best of several runs: ``addmm`` (or ``mm``) plus the activation as its own ATen kernel against
``_addmm_activation``. The fused call is taken when it is at least 3% faster. Products below
``MIN_FLOPS`` are left as they are, untimed (there a kernel launch is the whole cost, and the
decision would differ from run to run). ``"always"`` and ``"never"`` skip the timing (tests, and
turning the pass off). Every product's decision, with the timings or the reason, is in the
compile's linear log (``CompiledGraph.linear_log``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.utils._python_dispatch import _disable_current_modes

from .mkldnn import (
    _meta_mode,
    _propagate_meta,
    _static_inputs,
    _val,
    bias_vector,
    copied_graph,
    gemm_operands,
    time_min,
)
from .pad_mm import ALIGN_BYTES

aten = torch.ops.aten

MODES = ("measure", "always", "never")
ADDMM_ACTIVATION = aten._addmm_activation.default
#: 2*M*K*N below which a product is left as it is, untimed
MIN_FLOPS = 1e8
#: the fused call is taken when it takes at most this share of the product and activation's time
FASTER = 0.97
#: pointwise ops an activation's region may hold (each reads the product's value, its own
#: region's values and Python scalars, or None for a clamp's missing bound, only)
_POINTWISE = frozenset(
    {
        aten.mul.Tensor,
        aten.add.Tensor,
        aten.sub.Tensor,
        aten.div.Tensor,
        aten.pow.Tensor_Scalar,
        aten.tanh.default,
        aten.relu.default,
        aten.clamp_min.default,
        aten.clamp.default,
        aten.neg.default,
    }
)
#: most ops an activation's region holds, and how far after the product it is looked for
_MAX_REGION, _WINDOW = 12, 48
#: activation -> (``use_gelu``, its float64 reference)
_ACTIVATIONS: dict[str, tuple[bool, Callable[[torch.Tensor], torch.Tensor]]] = {
    "relu": (False, torch.relu),
    "gelu_tanh": (True, lambda v: torch.nn.functional.gelu(v, approximate="tanh")),
}
#: (device, M, K, N, dtype, strides, bias, activation) -> (fused faster, unfused s, fused s);
#: measured once per process
_DECISIONS: dict[tuple[Any, ...], tuple[bool, float, float]] = {}
#: (device, dtype) -> whether ``_addmm_activation``'s GELU is the tanh form there
_GELU_FORMS: dict[tuple[str, torch.dtype], bool] = {}


#: float64 values an activation's region is evaluated on, and each activation's values there
_PROBE = torch.cat(
    [
        torch.linspace(-8.0, 8.0, 1601, dtype=torch.float64),
        torch.tensor([-30.0, -1e-3, 0.0, 1e-3, 30.0], dtype=torch.float64),
    ]
)
_EXPECTED = {name: ref(_PROBE) for name, (_, ref) in _ACTIVATIONS.items()}


def _region(y: fx.Node) -> list[fx.Node]:
    """The pointwise ops after ``y`` (in graph order, within ``_WINDOW`` nodes) whose tensor
    arguments are ``y`` or earlier ops of the region, their other arguments numbers."""
    inside, region = {y}, []
    node = y.next
    for _ in range(_WINDOW):
        if node.op == "output" or len(region) >= _MAX_REGION:
            break
        if (
            node.op == "call_function"
            and node.target in _POINTWISE
            and not node.kwargs
            and any(a in inside for a in node.args)
            and all(
                a in inside
                if isinstance(a, fx.Node)
                else a is None or isinstance(a, (int, float)) and not isinstance(a, bool)
                for a in node.args
            )
        ):
            inside.add(node)
            region.append(node)
        node = node.next
    return region


def _cone(out: fx.Node, y: fx.Node, region: dict[fx.Node, int]) -> list[fx.Node] | None:
    """The ops of ``region`` that ``out`` is computed from, in graph order, ``out`` last, when
    ``y`` is among its inputs and nothing outside them reads ``y`` or any of them but ``out``
    (``region``: each op's place in graph order)."""
    cone, stack = {out}, [out]
    while stack:
        for a in stack.pop().all_input_nodes:
            if a in region and a not in cone:
                cone.add(a)
                stack.append(a)
    if not any(y in n.all_input_nodes for n in cone):
        return None
    for n in [y, *cone]:
        if n is not out and any(u not in cone for u in n.users):
            return None
    return sorted(cone, key=region.__getitem__)


def _evaluate(cone: list[fx.Node], y: fx.Node, x: torch.Tensor) -> torch.Tensor:
    env: dict[fx.Node, torch.Tensor] = {y: x}
    for n in cone:
        args = [env[a] if isinstance(a, fx.Node) else a for a in n.args]
        env[n] = n.target(*args)
    return env[cone[-1]]


def activation(y: fx.Node) -> tuple[str, list[fx.Node]] | str:
    """(the activation's name, its ops in graph order, the last one's value the activation's)
    applied to ``y``, the product's value, or why none is: the largest closed region of
    pointwise ops over ``y`` alone that computes ``relu`` or the tanh GELU (module docstring)."""
    if not isinstance(_val(y), torch.Tensor):
        return "no tensor meta value"
    region = _region(y)
    if not region:
        users = ", ".join(str(u.target) for u in y.users) or "nothing"
        return f"no pointwise activation reads it ({users} does)"
    members = {n: i for i, n in enumerate(region)}
    for out in reversed(region):
        cone = _cone(out, y, members)
        if cone is None:
            continue
        yv, ov = _val(y), _val(out)
        if not (isinstance(ov, torch.Tensor) and ov.shape == yv.shape and ov.dtype == yv.dtype):
            continue
        try:
            got = _evaluate(cone, y, _PROBE)
        except (RuntimeError, TypeError):
            continue
        for name, expected in _EXPECTED.items():
            if torch.allclose(got, expected, rtol=1e-9, atol=1e-12):
                return name, cone
    return "no closed region of its pointwise readers computes relu or the tanh GELU"


def gelu_is_tanh(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ATen's ``_addmm_activation(use_gelu=True)`` applies the tanh GELU on ``device``
    to ``dtype`` products, tried once on values where the two forms differ by many of the dtype's
    steps (-4 to -1.5: at -3 the exact GELU is -0.0040, the tanh form -0.0036). CUDA's is the
    tanh form (cuBLASLt's ``GELU_BIAS`` epilogue, or ATen's fallback of ``addmm`` then
    ``gelu(approximate="tanh")``); the CPU's is the exact one, so the pass leaves a GELU there."""
    key = (str(device), dtype)
    if key not in _GELU_FORMS:
        try:
            with torch.no_grad(), _disable_current_modes():
                v = torch.linspace(-4.0, -1.5, 64, device=device).to(dtype)
                x = v[:, None].expand(64, 16).contiguous()
                eye = torch.eye(16, dtype=dtype, device=device)
                zero = torch.zeros(16, dtype=dtype, device=device)
                got = torch._addmm_activation(zero, x, eye, use_gelu=True).float()
                gelu = torch.nn.functional.gelu
                tanh = gelu(x.float(), approximate="tanh").to(dtype).float()
                exact = gelu(x.float()).to(dtype).float()
                _GELU_FORMS[key] = bool((got - tanh).abs().sum() < (got - exact).abs().sum())
        except RuntimeError:
            _GELU_FORMS[key] = False
    return _GELU_FORMS[key]


def _aligned(v: torch.Tensor) -> bool:
    per = ALIGN_BYTES // v.element_size()  # pad_mm.py pads the others: this pass leaves them
    return all(s % per == 0 for s in v.shape)


def _product(node: fx.Node) -> tuple[Any, fx.Node, fx.Node] | str:
    """(bias or None, x, w) of an ``addmm``/``mm`` cuBLASLt can apply an epilogue to, or why not."""
    operands = gemm_operands(node)
    if isinstance(operands, str):
        return operands
    bias, x, w = operands
    xv, wv, yv = _val(x), _val(w), _val(node)
    if not all(isinstance(v, torch.Tensor) for v in (xv, wv, yv)):
        return "no tensor meta value"
    if yv.dtype not in (torch.bfloat16, torch.float16, torch.float32) or not (
        xv.dtype == wv.dtype == yv.dtype
    ):
        return f"{yv.dtype} product"
    if not all(isinstance(s, int) for v in (xv, wv) for s in (*v.shape, *v.stride())):
        return "symbolic sizes"
    if not (_aligned(xv) and _aligned(wv)):
        return "unaligned sizes (padded by pad_mm, if at all)"
    if bias is not None and not (
        bias_vector(bias, yv.shape[1], yv.dtype) and _val(bias).stride() == (1,)
    ):
        return "its bias is not a contiguous vector of the output width"
    return bias, x, w


def _strided(v: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device).normal_()


def _measured(
    xv: torch.Tensor, wv: torch.Tensor, bias: bool, act: str
) -> tuple[bool, float, float]:
    """(the fused call is faster, unfused seconds, fused seconds) for this product, measured once
    per process on real tensors of its sizes and strides; a fused call that fails is not taken."""
    key = (
        str(xv.device),
        *xv.shape,
        wv.shape[1],
        xv.dtype,
        xv.stride(),
        wv.stride(),
        bias,
        act,
    )
    if key not in _DECISIONS:
        try:
            _DECISIONS[key] = _measure(xv, wv, bias, act)
        except RuntimeError:
            _DECISIONS[key] = (False, math.nan, math.nan)
    return _DECISIONS[key]


def _measure(xv: torch.Tensor, wv: torch.Tensor, bias: bool, act: str) -> tuple[bool, float, float]:
    use_gelu, _ = _ACTIVATIONS[act]
    with torch.no_grad(), _disable_current_modes():
        x, w = _strided(xv), _strided(wv)
        b = torch.randn(w.shape[1], dtype=x.dtype, device=x.device)
        zero = torch.zeros_like(b)

        def unfused():
            y = torch.addmm(b, x, w) if bias else torch.mm(x, w)
            if use_gelu:
                return torch.nn.functional.gelu(y, approximate="tanh")
            return torch.relu(y)

        def fused():
            return torch._addmm_activation(b if bias else zero, x, w, use_gelu=use_gelu)

        sync = torch.cuda.synchronize if x.device.type == "cuda" else None
        times = time_min({"unfused": unfused, "fused": fused}, min_reps=5, calls=4, sync=sync)
    return times["fused"] < FASTER * times["unfused"], times["unfused"], times["fused"]


def use_cublas_epilogues(
    gm: fx.GraphModule, mode: str = "measure"
) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """A copy of ``gm`` whose products followed by ReLU or the tanh GELU are
    ``_addmm_activation`` calls where ``mode`` says so ("measure": where timing says the fused
    call is faster, "always", "never"), and the log of decisions (one line per product
    considered)."""
    if mode not in MODES:
        raise ValueError(f"cublas_epilogues must be one of {MODES}, got {mode!r}")
    products = [n for n in gm.graph.nodes if n.target in (aten.addmm.default, aten.mm.default)]
    if not products or mode == "never":
        return gm, ()
    log: list[str] = []
    plans: dict[fx.Node, tuple[Any, ...]] = {}
    for p in products:
        view = next(iter(p.users)) if len(p.users) == 1 else None
        y = (
            view
            if view is not None and view.target in (aten.view.default, aten._unsafe_view.default)
            else p
        )
        found = activation(y)
        if isinstance(found, str):
            continue  # no activation: nothing to say of a plain product
        act, cone = found
        parts = _product(p)
        if isinstance(parts, str):
            log.append(f"{p.name}: {p.target} kept, its {act} not in the epilogue ({parts})")
            continue
        bias, x, w = parts
        yv = _val(p)
        if act == "gelu_tanh" and not gelu_is_tanh(yv.device, yv.dtype):
            log.append(
                f"{p.name}: {p.target} kept (ATen's _addmm_activation on {yv.device.type} "
                f"applies the exact GELU to {yv.dtype}, not the tanh form)"
            )
            continue
        m, k = _val(x).shape
        n = _val(w).shape[1]
        what = f"{m}x{k}x{n}" + (" + bias" if bias is not None else "") + f" + {act}"
        flops = 2 * m * k * n
        if mode == "measure" and flops < MIN_FLOPS:
            log.append(
                f"{p.name}: {p.target} kept ({what}: {flops / 1e6:.0f} MFLOP, below "
                f"{MIN_FLOPS / 1e6:.0f}: a launch is the whole cost there)"
            )
            continue
        timing = f"mode {mode!r}"
        if mode == "measure":
            faster, t_base, t_fused = _measured(_val(x), _val(w), bias is not None, act)
            timing = (
                f"unfused {t_base * 1e6:.1f} us, fused {t_fused * 1e6:.1f} us"
                if not math.isnan(t_fused)
                else "the fused call failed when timed"
            )
            if not faster:
                log.append(f"{p.name}: {p.target} kept ({what}: {timing}; fused not 3% faster)")
                continue
        plans[p] = (bias, x, w, y, act, cone, what, timing)
    if not plans:
        return gm, tuple(log)
    graph, copies = copied_graph(gm)
    if not _static_inputs(graph):
        return gm, (*log, *(f"{p.name}: {p.target} kept (symbolic graph inputs)" for p in plans))
    mode_, propagated = _meta_mode(graph)
    for p, (bias, x, w, y, act, cone, what, timing) in plans.items():
        p2, y2, cone2 = copies[p], copies[y], [copies[c] for c in cone]
        x2, w2 = copies[x], copies[w]
        yv = _val(p)
        with graph.inserting_before(p2):
            b2 = (
                copies[bias]
                if bias is not None
                else graph.call_function(
                    aten.zeros.default,
                    ([yv.shape[1]],),
                    {"dtype": yv.dtype, "device": yv.device},
                )
            )
            fused = graph.call_function(
                ADDMM_ACTIVATION, (b2, x2, w2), {"use_gelu": _ACTIVATIONS[act][0]}
            )
            result = fused
            if y2 is not p2:
                result = graph.call_function(y2.target, (fused, *y2.args[1:]))
        cone2[-1].replace_all_uses_with(result)
        for node in reversed([p2, *([y2] if y2 is not p2 else []), *cone2]):
            graph.erase_node(node)
        log.append(
            f"{p.name}: {what} as _addmm_activation, the activation in the epilogue ({timing})"
        )
    _propagate_meta(graph, mode_, since=propagated)
    # the module is made once the graph is final: making it writes its Python code
    new_gm = fx.GraphModule(gm, graph)
    graph.lint()
    return new_gm, tuple(log)
