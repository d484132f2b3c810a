"""Run one fuzzed program eagerly, compiled and in float64, and judge the compiled run.

Verdicts (``Outcome.kind``):
- "ok": same results (by the tolerance rule below), same input state after mutation, or the same
  exception type as eager;
- "wrong": a result, an output dtype/shape, or an input's state after the call differs;
- "no-error": eager raised, the compiled function returned (an error check compiled away);
- "crash": compiled raised where eager did not, or raised another exception type;
- "unstable": a bool/int result that depends on float rounding (compiled agrees with the float64
  reference where it disagrees with eager, or a C++ program agrees with eager once compiled
  without libmvec's vector math, a few ULP from scalar libm's), or a float result whose NaN/infinity pattern differs
  from eager's and matches the float64 reference's (eager's rounding crossed a 0/0 boundary),
  or a float result that fails the float64-reference rule below against eager but passes it
  against eager with one ulp of other rounding in each op's results (``_Perturb``, three
  draws: eager's own error was small by chance): not counted as wrong, listed;
- "undefined": eager ran an in-place op whose other operand overlaps the written tensor without
  being it (``t.add_(t[1])`` where ``t`` is the input): eager's result then depends on the order
  its loop visits memory (PyTorch leaves it undefined; compilers read the operand before the
  write), so results are not compared; listed. For a training program also: eager's backward
  refused (a value it saved was written in place since) and the compiled one did not (when
  both raise that error the verdict is "ok": the same behaviour), or the compiled backward refused because a graph input an earlier graph saved was written by a
  later graph of the program (after a break), where eager's formula saved something derived
  from it (docs/aot-partition.md's known limits);
``Outcome.fallback`` says whether any graph ran eagerly because the pipeline failed on it (its
reasons in ``Outcome.fallback_reasons``); ``Outcome.error_replay``: the only "fallback" was the
program's own error (raised eagerly too) coming out of a compiled graph, which the pipeline then
replays eagerly (counted apart: the graph compiled; the replay is the pipeline's error policy);
``op_fallbacks`` are ATen ops run as fallback kernels
inside compiled graphs (not eager fallbacks: listed for information).

Training programs (``Program.train``): each input that requires grad is a leaf copied into a
tensor of the input's layout, which the program receives (no leaf: it may write it in place);
after the results compare, the gradients of ``sum(out * w)`` over the float results (random
``w``, the same for the three runs) with respect to those leaves are compared by the same
rule, eager's and compiled's against the float64 run's, and which results require grad must
match eager's. A graph that ran eagerly because eager's backward raises the same error (the
joint trace runs eager's autograd) is the program's own error (``error_replay``).

The tolerance rule for floats: compiled passes if it is close to eager at torch.testing's default
tolerance for the dtype; otherwise, when a float64 run of the same program exists, compiled must be
at least about as accurate as eager against it: RMSE(compiled - ref) <= 2 * RMSE(eager - ref) +
tol/10 and max|compiled - ref| <= 4 * max|eager - ref| + tol, with torch's accuracy-harness
tolerance ``tol`` for the dtype (``FP64_RULE_TOL``: the rule of torch's own ``same(..., fp64_ref)``,
plus a bound on the worst element so one wild element cannot hide in the mean). Its absolute
floor covers results that cancel to about zero, where eager is exact by consistency (it computes
``erf(x)`` once and ``x - mean(x)`` of one element is 0) and a compiler that computes the value in
two kernels, with a vector and a scalar libm, is a rounding away (1 ulp of ``erf`` over
``sqrt(eps)`` in a one-element layer norm). NaN and infinity patterns must match eager's exactly. A float32/float64
result of a program with bfloat16/float16 inputs gets the low dtype's tolerance
(``program_precision``), and so does a float64 result (or gradient) that eager computed through
a float32 value (``_Precision``: ``x64 + x32.sum()`` carries the float32 sum's rounding, which
another order of the same sum changes by an ulp of float32, far above float64's tolerance).
"""

from __future__ import annotations

import contextlib
import io
import math
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .program import Program, make_input

# torch's accuracy harness (``same(..., fp64_ref, tol=...)`` in its benchmark runners)
FP64_RULE_TOL = {
    torch.float16: 1e-3,
    torch.bfloat16: 1e-2,
    torch.float32: 1e-4,
    torch.float64: 1e-7,
}

# torch.testing.assert_close defaults
TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


@dataclass
class Outcome:
    seed: int
    kind: str = "ok"
    detail: str = ""
    fallback: bool = False
    fallback_reasons: list[str] = field(default_factory=list)
    op_fallbacks: list[str] = field(default_factory=list)
    eager_error: str = ""
    error_replay: bool = False


def _inputs(program: Program, seed: int, reference: bool = False) -> list[torch.Tensor]:
    return [make_input(spec, seed * 1000 + i, reference) for i, spec in enumerate(program.inputs)]


def _with_grad(program: Program, args: list[torch.Tensor]) -> tuple[list, list]:
    """(arguments, leaves) of a training program: each input that requires grad is a leaf of its
    own, copied into a tensor of the input's layout (the same sizes, strides and offset in a
    buffer of the same extent). The argument is then no leaf, as a model's activation is: the
    program may write it in place, and the gradient reaches the leaf through the copy."""
    out, leaves = [], []
    for spec, t in zip(program.inputs, args):
        if not spec.requires_grad:
            out.append(t)
            continue
        leaf = t.detach().clone().requires_grad_()
        buffer = torch.zeros_like(t._base if t._base is not None else t)
        arg = buffer.as_strided(t.shape, t.stride(), t.storage_offset())
        arg.copy_(leaf)
        out.append(arg)
        leaves.append(leaf)
    return out, leaves


def _gradients(result: Any, leaves: list, seed: int) -> tuple[list | None, BaseException | None]:
    """The gradients of ``sum(out * w)`` over the float results that require grad, with
    respect to ``leaves`` (None for a leaf the loss does not reach); the weights ``w`` are
    random, the same for the same seed and shapes. (None, None) when no result requires grad."""
    outs = [t for t in _flat(result) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not leaves:
        return None, None
    g = torch.Generator().manual_seed(seed)
    loss = sum(
        (o.double() * torch.randn(o.shape, generator=g, dtype=torch.float64)).sum() for o in outs
    )
    try:
        return list(torch.autograd.grad(loss, leaves, allow_unused=True)), None
    except Exception as e:  # noqa: BLE001 - eager's own refusal is part of its behaviour
        return None, e


def _run(fn, args) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - the program's own error is part of its behaviour
        return None, e


class _PartialOverlap(TorchDispatchMode):
    """Records in-place ops (``found``) that read an operand partially overlapping the tensor
    they write: memory ranges that intersect, without being the same view."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        if schema.is_mutable:
            values = [
                kwargs.get(a.name) if a.kwarg_only else (args[i] if i < len(args) else None)
                for i, a in enumerate(schema.arguments)
            ]
            written = [
                v
                for a, v in zip(schema.arguments, values)
                if isinstance(v, torch.Tensor)
                and a.alias_info is not None
                and a.alias_info.is_write
            ]
            read = [v for v in pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]
            for w in written:
                if any(r is not w and _overlaps(w, r) for r in read):
                    self.found.append(str(func))
        return func(*args, **kwargs)


#: float dtypes from the least precise: a value computed through one carries its rounding
_PRECISION_ORDER = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def _lowest(a: torch.dtype | None, b: torch.dtype | None) -> torch.dtype | None:
    """The less precise of two float dtypes (None: no float)."""
    if a is None or b is None:
        return a if b is None else b
    return min(a, b, key=_PRECISION_ORDER.index)


def _float_dtype(t: torch.Tensor) -> torch.dtype | None:
    return t.dtype if t.dtype in _PRECISION_ORDER else None


class _Precision(TorchDispatchMode):
    """The least precise float dtype each tensor of a run was computed through (``through``):
    each op's outputs carry the lowest of their inputs' and their own. ``x64 + x32.sum()`` is
    float64 computed through float32; ``(x32 < 0) * x64`` too (the comparison's bool carries
    the float32 values it compared)."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.weak import WeakTensorKeyDictionary

        self.low: Any = WeakTensorKeyDictionary()

    def through(self, t: Any) -> torch.dtype | None:
        if not isinstance(t, torch.Tensor):
            return None
        return _lowest(self.low.get(t), _float_dtype(t))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        low = None
        for t in pytree.tree_leaves((args, kwargs)):
            low = _lowest(low, self.through(t))
        if low is not None:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.low[t] = _lowest(low, _float_dtype(t))
        return out

    def computed_in(self, t: Any) -> torch.dtype | None:
        """The dtype ``t`` was computed through when it is less precise than ``t``'s own."""
        if not isinstance(t, torch.Tensor) or t.dtype not in _PRECISION_ORDER:
            return None  # an integer or bool result is compared exactly (or found unstable)
        low = self.through(t)
        return None if low is None or low == t.dtype else low


#: ops whose floating results are exact (no rounding): moves, selections, fills, picks, sign
#: and magnitude changes. ``_Perturb`` leaves their results alone
_EXACT_OPS = frozenset(
    """clone copy copy_ cat stack index index_select gather scatter index_put index_put_ where
    masked_fill masked_fill_ masked_scatter fill fill_ zero_ zeros zeros_like ones ones_like full
    full_like empty empty_like empty_strided new_zeros new_ones new_full new_empty expand_copy
    permute_copy constant_pad_nd slice_scatter select_scatter diagonal_scatter as_strided_scatter
    flip roll repeat max min amax amin maximum minimum max_pool2d_with_indices
    max_pool2d_with_indices_backward relu abs abs_ neg neg_ sort topk clamp clamp_ clamp_min
    clamp_max sign floor ceil round trunc lift_fresh_copy _unsafe_view alias_copy""".split()
)


class _Perturb(TorchDispatchMode):
    """Eager with another legitimate rounding: each result of an op that rounds (not a view,
    not one of ``_EXACT_OPS``, not a widening cast) is moved by one ulp of its dtype up or down,
    or left, at random per element (seeded). Autograd does not see it (dispatch runs below
    autograd), so the backward's ops are perturbed as they run, the same way. Its error against
    the float64 reference is a second draw of eager's rounding error, for results whose eager
    error was small by chance (a sum of rounding noise; a zero-variance layer norm, whose
    1/sqrt(eps) multiplies an ulp of the values around it)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        if name in _EXACT_OPS:
            return out
        if (
            name == "_to_copy"
            and isinstance(args[0], torch.Tensor)
            and isinstance(out, torch.Tensor)
        ):
            src = args[0]
            if not (src.is_floating_point() and out.is_floating_point()) or (
                torch.finfo(out.dtype).eps <= torch.finfo(src.dtype).eps
            ):
                return out  # a widening cast (or to/from an integer): exact
        returns = func._schema.returns
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for r, t in zip(returns, outs):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
                continue
            if r.alias_info is not None and not r.alias_info.is_write:
                continue  # a view: its base was perturbed where it was computed
            step = torch.randint(-1, 2, t.shape, generator=self.gen).to(t.device, t.dtype)
            with torch.no_grad(), contextlib.suppress(RuntimeError):  # (an expanded result)
                t.mul_(1 + step * torch.finfo(t.dtype).eps)
        return out


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.storage_offset() * t.element_size()
    extent = sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
    return start, start + (extent + 1) * t.element_size()


def _overlaps(w: torch.Tensor, r: torch.Tensor) -> bool:
    if w.numel() == 0 or r.numel() == 0 or w.device != r.device:
        return False
    if w.untyped_storage().data_ptr() != r.untyped_storage().data_ptr():
        return False
    if (w.storage_offset(), w.shape, w.stride(), w.dtype) == (
        r.storage_offset(),
        r.shape,
        r.stride(),
        r.dtype,
    ):
        return False  # the same view: x.add_(x) is well defined
    (a, b), (c, d) = _span(w), _span(r)
    return a < d and c < b


def _flat(result: Any) -> list[Any]:
    return pytree.tree_leaves(result)


#: in ``_float_close``'s reason when the float64-reference rule failed (``judge`` then asks
#: whether eager with other rounding passes it)
_FP64_RULE_FAILED = "vs float64: rmse"


def _float_close(
    c: torch.Tensor, e: torch.Tensor, r: torch.Tensor | None, computed_in: torch.dtype | None = None
) -> str:
    """'' when ``c`` passes against eager ``e`` (and the float64 reference ``r``), else why not.
    ``computed_in``: the lowest-precision float dtype of the program's values, when lower than
    ``e``'s (see ``program_precision``)."""
    rtol, atol = TOLERANCES.get(e.dtype, (1e-7, 1e-7))
    if computed_in is not None:
        low_rtol, low_atol = TOLERANCES.get(computed_in, (rtol, atol))
        rtol, atol = max(rtol, low_rtol), max(atol, low_atol)
    if torch.allclose(c, e, rtol=rtol, atol=atol, equal_nan=True):
        return ""
    c64, e64 = c.double(), e.double()
    if not torch.equal(torch.isnan(c64), torch.isnan(e64)):
        return "NaN pattern differs"
    if not torch.equal(
        torch.isinf(c64) & (c64 > 0), torch.isinf(e64) & (e64 > 0)
    ) or not torch.equal(torch.isinf(c64) & (c64 < 0), torch.isinf(e64) & (e64 < 0)):
        return "infinity pattern differs"
    worst = (c64 - e64).abs().nan_to_num(0).max().item()
    if r is None or r.shape != c.shape:
        return f"max abs diff {worst:.3g} vs eager (no float64 reference)"
    r64 = r.double()
    finite = torch.isfinite(c64) & torch.isfinite(e64) & torch.isfinite(r64)
    if not finite.any():
        return ""
    dc, de = (c64 - r64)[finite], (e64 - r64)[finite]
    rmse_c, rmse_e = dc.pow(2).mean().sqrt().item(), de.pow(2).mean().sqrt().item()
    max_c, max_e = dc.abs().max().item(), de.abs().max().item()
    tol = max(FP64_RULE_TOL.get(e.dtype, atol), FP64_RULE_TOL.get(computed_in, 0.0))
    if rmse_c <= 2 * rmse_e + tol / 10 and max_c <= 4 * max_e + tol:
        return ""
    return (
        f"max abs diff {worst:.3g} vs eager; {_FP64_RULE_FAILED} {rmse_c:.3g} (eager {rmse_e:.3g}), "
        f"max {max_c:.3g} (eager {max_e:.3g})"
    )


def program_precision(program: Program) -> torch.dtype | None:
    """The lowest-precision float dtype of the program's inputs (bfloat16, float16), or None.

    A float32/float64 result computed from bfloat16 values (``t = log_softmax(x_bf16) - x64``)
    carries bfloat16 rounding, and where eager and compiled round the bfloat16 intermediate
    differs by up to one bfloat16 ulp: eager's CPU kernels round some internal values to the
    input dtype (log_softmax rounds its sum and its log to bfloat16), torchkiln's kernels keep
    them in float32 and round once at the end (as eager's CUDA kernels and ATen's decompositions
    do). The result's dtype tolerance (float64: 1e-7) cannot hold that, so such results get the
    tolerance of the dtype they were computed through; the float64-reference rule still applies.
    Low-precision values enter a program only through its inputs (the generator casts to
    float32, float64, int64 and bool)."""
    lows = [getattr(torch, s.dtype) for s in program.inputs if s.dtype in ("bfloat16", "float16")]
    if not lows:
        return None
    return torch.bfloat16 if torch.bfloat16 in lows else torch.float16


def _special_pattern_matches(c: torch.Tensor, r: torch.Tensor | None) -> bool:
    """Whether ``c`` has NaN and each infinity where the float64 reference, in ``c``'s dtype,
    has them, and its finite values are close to the reference's."""
    if r is None or r.shape != c.shape:
        return False
    c64, r64 = c.double(), r.to(c.dtype).double()
    for mask in (torch.isnan, torch.isposinf, torch.isneginf):
        if not torch.equal(mask(c64), mask(r64)):
            return False
    finite = torch.isfinite(c64)
    rtol, atol = TOLERANCES.get(c.dtype, (1e-7, 1e-7))
    return torch.allclose(
        c64[finite], r64[finite], rtol=rtol, atol=max(atol, FP64_RULE_TOL.get(c.dtype, 0.0))
    )


def compare(c: Any, e: Any, r: Any, computed_in: torch.dtype | None = None) -> tuple[str, str]:
    """(kind, detail) for one leaf: kind in "", "wrong", "unstable"."""
    if isinstance(e, torch.Tensor):
        if not isinstance(c, torch.Tensor):
            return "wrong", f"got {type(c).__name__}, eager gave a tensor"
        if c.dtype != e.dtype:
            return "wrong", f"dtype {c.dtype} vs eager {e.dtype}"
        if c.shape != e.shape:
            return "wrong", f"shape {tuple(c.shape)} vs eager {tuple(e.shape)}"
        r = r if isinstance(r, torch.Tensor) else None
        if e.is_floating_point():
            why = _float_close(c, e, r, computed_in)
            if why and why.endswith("pattern differs") and _special_pattern_matches(c, r):
                # eager's own rounding moved a value across a NaN/inf boundary (0/0 against
                # 1e-5/0: eager's float16 layer norm of one element is 1e-5, not 0)
                return "unstable", f"{why} from eager's, matches float64's"
            return ("wrong", why) if why else ("", "")
        if torch.equal(c, e):
            return "", ""
        if r is not None and r.shape == c.shape:
            # a bool/int that depends on float rounding: compiled agrees with float64 there
            differ = c != e
            if torch.equal(c[differ], r.to(c.dtype)[differ]):
                return (
                    "unstable",
                    f"{int(differ.sum())} element(s) differ from eager, match float64",
                )
        n = int((c != e).sum())
        return "wrong", f"{n} of {e.numel()} element(s) differ"
    if isinstance(e, float) and isinstance(c, float):
        return (
            ("", "")
            if (math.isnan(c) and math.isnan(e)) or math.isclose(c, e, rel_tol=1e-6)
            else ("wrong", f"{c} vs {e}")
        )
    return ("", "") if c == e else ("wrong", f"{c!r} vs {e!r}")


def judge(
    program: Program,
    *,
    seed: int | None = None,
    options: dict | None = None,
    perturb: int | None = None,
) -> Outcome:
    """Run ``program`` eagerly, compiled (torchkiln.compile) and in float64, and judge it.
    ``perturb``: eager runs (forward and backward) under ``_Perturb`` with that draw."""
    import torchkiln

    seed = program.seed if seed is None else seed
    out = Outcome(program.seed)
    eager_in, eager_wrt = _with_grad(program, _inputs(program, seed))
    comp_in, comp_wrt = _with_grad(program, _inputs(program, seed))
    ref_in, ref_wrt = _with_grad(program, _inputs(program, seed, True))
    overlap, precision = _PartialOverlap(), _Precision()
    perturbing = _Perturb(seed * 7919 + perturb) if perturb is not None else None
    with overlap, precision, perturbing or contextlib.nullcontext():
        eager_res, eager_err = _run(program.function(), eager_in)
    ref_res, ref_err = _run(program.function(reference=True), ref_in)
    opts: dict = {"codegen": "triton"} if program.codegen == "triton" else {}
    if program.codegen == "triton":
        # Triton graphs on a GPU launch their small independent kernels as combo kernels (the
        # default there, loop-ir's combos.py); judged here as they would run there
        opts["loop_ir"] = {"combo_kernels": "always"}
    if program.loop_ir:
        opts["loop_ir"] = {**opts.get("loop_ir", {}), **program.loop_ir}
    opts.update(options or {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                compiled = torchkiln.compile(
                    program.function(), dynamic=program.dynamic or None, options=opts
                )
            except Exception as e:  # noqa: BLE001
                out.kind, out.detail = "crash", f"torchkiln.compile raised {type(e).__name__}: {e}"
                return out
            comp_res, comp_err = _run(compiled, comp_in)
    report = torchkiln.report(compiled)
    out.fallback_reasons = [f.reason for f in report.eager_fallbacks]
    out.fallback_reasons += [
        str(w.message)
        for w in caught
        if "torchkiln" in str(w.message)
        and "eager" in str(w.message)
        and not any(str(w.message).find(r) >= 0 for r in out.fallback_reasons)
    ]
    out.fallback = bool(out.fallback_reasons)
    out.op_fallbacks = [op for g in report.graphs for op in g.fallbacks]
    if eager_err is not None:
        out.eager_error = type(eager_err).__name__
        prefix = "running the compiled graph failed"
        if out.fallback and all(
            prefix in r and type(eager_err).__name__ in r for r in out.fallback_reasons
        ):
            out.fallback, out.error_replay = False, True
        if comp_err is None:
            out.kind, out.detail = (
                "no-error",
                f"eager raised {type(eager_err).__name__}: {str(eager_err)[:200]}; compiled returned",
            )
        elif not (isinstance(comp_err, type(eager_err)) or isinstance(eager_err, type(comp_err))):
            out.kind = "crash"
            out.detail = (
                f"compiled raised {type(comp_err).__name__}: {str(comp_err)[:300]}; eager raised "
                f"{type(eager_err).__name__}: {str(eager_err)[:200]}"
            )
        return out
    if comp_err is not None:
        _crash(out, "compiled", comp_err)
        return out
    ref_leaves = _flat(ref_res) if ref_err is None else None
    e_leaves, c_leaves = _flat(eager_res), _flat(comp_res)
    if len(e_leaves) != len(c_leaves):
        out.kind, out.detail = "wrong", f"{len(c_leaves)} results, eager gave {len(e_leaves)}"
        return out
    checks = [
        (
            f"result {i}",
            c,
            e,
            ref_leaves[i] if ref_leaves and len(ref_leaves) == len(e_leaves) else None,
        )
        for i, (c, e) in enumerate(zip(c_leaves, e_leaves))
    ]
    checks += [
        (f"input x{i} after the call", c, e, r)
        for i, (c, e, r) in enumerate(zip(comp_in, eager_in, ref_in))
    ]
    if overlap.found:
        out.kind, out.detail = "undefined", f"eager's {overlap.found[0]} reads memory it writes"
        return out
    computed_in = program_precision(program)
    if program.train:
        flags = [t.requires_grad for t in c_leaves if isinstance(t, torch.Tensor)]
        if flags != [t.requires_grad for t in e_leaves if isinstance(t, torch.Tensor)]:
            out.kind, out.detail = "wrong", f"results' requires_grad {flags} differ from eager's"
            return out
        grads = _judge_gradients(
            out,
            seed,
            (
                (comp_res, comp_wrt),
                (eager_res, eager_wrt),
                (ref_res if ref_err is None else None, ref_wrt),
            ),
            bool(program.breaks),
            precision,
            perturbing,
        )
        if grads is None:
            return out
        checks += grads
    rounding = False  # the wrong result is a bool/int (a comparison of floats, a cast)
    noise = False  # the wrong result is a float judged against float64 (eager's error small)
    for what, c, e, r in checks:
        kind, why = compare(c, e, r, _lowest(computed_in, precision.computed_in(e)))
        if kind == "wrong" or (kind == "unstable" and out.kind == "ok"):
            out.kind, out.detail = kind, f"{what}: {why}"
            if kind == "wrong":
                rounding = isinstance(c, torch.Tensor) and not c.is_floating_point()
                noise = isinstance(c, torch.Tensor) and _FP64_RULE_FAILED in why
                break
    if rounding and program.codegen != "triton" and not (options or {}).get("cpp_options"):
        # libmvec's float32 exp/erf/tanh/... are a few ULP from eager's (codegen-cpp's
        # vector_math): a comparison of a value with gelu(value) may flip where the two round
        # to neighbours. Judged again with scalar libm: "ok" then is rounding, not a wrong result
        again = judge(program, seed=seed, options={"cpp_options": {"vector_math": False}})
        if again.kind == "ok":
            out.kind = "unstable"
            out.detail += " (with codegen-cpp's vector_math off: ok; a few ULP of libmvec's)"
    if noise and perturb is None:
        # eager's own error against float64 may have been small by chance (a sum of rounding
        # noise; an ulp multiplied by a zero-variance layer norm's 1/sqrt(eps)): judged again
        # against eager with one ulp of other rounding in each op's results, three draws.
        # Passing one makes it "unstable" (listed, not counted as wrong): the compiled result
        # is as far from float64 as eager's rounding can put it; a wrong value is not.
        for draw in range(3):
            again = judge(program, seed=seed, options=options, perturb=draw)
            if again.kind in ("ok", "unstable"):
                out.kind = "unstable"
                out.detail += f" (against eager with other rounding, draw {draw}: ok)"
                break
    return out


def _judge_gradients(
    out: Outcome,
    seed: int,
    runs,
    breaks: bool,
    precision: _Precision | None = None,
    perturbing: _Perturb | None = None,
) -> list | None:
    """The gradient checks of a training program, ``(what, compiled, eager, reference)`` for
    each input that requires grad; None when ``out`` is decided already. ``runs``: (result,
    leaves) of the compiled, eager and float64 runs (the reference's result None when it
    raised). Eager's backward may refuse (a value it saved was written in place since): when
    the compiled backward raises the same error, the program behaved as eager's (no gradient
    to compare); when it does not (the write came after a break, and the graph before it saved
    what it needs in a form the write does not touch), gradients are not compared ("undefined",
    listed). ``breaks``: the program has graph breaks, so a graph may write in
    place an input that an earlier graph saved. ``precision``: eager's backward runs under it,
    so that a gradient computed through a less precise value is judged at its tolerance;
    ``perturbing``: and under that ``_Perturb`` (``judge``'s ``perturb``)."""
    (comp_res, comp_leaves), (eager_res, eager_leaves), (ref_res, ref_leaves) = runs
    with (
        precision if precision is not None else contextlib.nullcontext(),
        perturbing or contextlib.nullcontext(),
    ):
        e_grads, e_err = _gradients(eager_res, eager_leaves, seed)
    c_grads, c_err = _gradients(comp_res, comp_leaves, seed)
    if e_err is not None:
        if (
            c_err is not None
            and type(c_err) is type(e_err)
            and str(c_err)[:60] == str(e_err)[:60]
            and not out.fallback
        ):
            # the compiled backward raised eager's error (an output whose backward eager
            # refuses keeps refusing: aot-partition's ``poisoned_outputs``): the same behaviour,
            # no gradient to compare
            out.detail = f"both backwards raised {type(e_err).__name__}: {str(e_err)[:120]}"
            return []
        out.kind = "undefined"
        out.detail = f"eager's backward raised {type(e_err).__name__}: {str(e_err)[:160]}"
        if out.fallback and all(str(e_err)[:60] in r for r in out.fallback_reasons):
            # the joint trace runs eager's autograd, which raised the same error: the graph ran
            # eagerly so that its backward raises as eager's does (the program's own error)
            out.fallback, out.error_replay = False, True
        return None
    if c_err is not None and breaks and "modified by an inplace operation" in str(c_err):
        # a graph saved one of its inputs for its backward (a primal costs no memory), where
        # eager's formula saved something derived from it (``where``'s mask), and a later
        # graph wrote that input in place: a limit shared with torch.compile's partitioner
        # (docs/aot-partition.md), not a wrong result: listed, not compared
        out.kind = "undefined"
        out.detail = f"compiled backward: a saved graph input was written later: {c_err}"[:300]
        return None
    if c_err is not None:
        _crash(out, "compiled backward", c_err)
        return None
    if e_grads is None:
        return []
    r_grads = None
    if ref_res is not None:
        r_grads, _ = _gradients(ref_res, ref_leaves, seed)
    checks = []
    for k, (c, e) in enumerate(zip(c_grads, e_grads)):
        r = r_grads[k] if r_grads is not None else None
        if (c is None) != (e is None):
            out.kind = "wrong"
            out.detail = f"gradient of leaf {k}: {'None' if c is None else 'a tensor'}, eager's is {'None' if e is None else 'a tensor'}"
            return None
        if c is not None:
            checks.append((f"gradient of leaf {k}", c, e, r))
    return checks


def _crash(out: Outcome, what: str, err: BaseException) -> None:
    """``out`` is a crash: ``what`` raised ``err`` where eager did not (its last frames kept)."""
    out.kind = "crash"
    tb = "".join(traceback.format_exception(err)[-3:])
    out.detail = f"{what} raised {type(err).__name__}: {str(err)[:300]}\n{tb}"
