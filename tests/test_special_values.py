"""Every pointwise and reduction lowering on special values, through both code generators (and
loop-ir's reference backend), against eager.

The op table is test_ops_specs.py's: each spec's function is run on inputs made of NaN, +-inf, +-0,
denormals and each dtype's extremes (float32, float64, float16, bfloat16, int32, int64, bool)
instead of random numbers. Binary and ternary specs see every pair of special values (operand j
of an element k holds ``values[(k // n**j) % n]``); reductions see rows that mix normal numbers
with one or two special values, plus rows of infinities and of values whose sum or spread
overflows. Outputs are compared with eager (assert_close with equal_nan, exact for integers and
bools, and the sign of every zero); a 16-bit float output must equal eager's in its dtype or
eager's in float32 rounded to it (what a fused kernel computes, as test_ops_codegen.py checks).
Tolerances are test_ops_codegen.py's.

To keep the Triton interpreter inside CI's time budget, the specs of one family (unary, binary,
where/clamp/masked_fill, reductions) in all their dtypes are traced into one graph and compiled
once per code generator. Integer division and remainder are their own graph: with a zero divisor
eager raises ``RuntimeError('ZeroDivisionError')``, and so must the compiled graph; then the same
graph runs with the zeros replaced by ones and its values are compared.

A (spec, dtype, code generator) that still differs from eager is listed in ``KNOWN`` with the
reason; the test fails if it starts to pass (strict, like ``xfail(strict=True)``) as well as on
any difference not listed. ``MAY_DIFFER`` lists the few that depend on the machine (the host's
vector width), checked on neither side.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx

pytestmark = pytest.mark.usefixtures("private_cache_dir")  # tests/conftest.py


def _load(module_name: str, file_name: str):
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, Path(__file__).with_name(file_name)
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


S = _load("torchkiln_op_specs", "test_ops_specs.py")
OC = _load("torchkiln_ops_codegen", "test_ops_codegen.py")

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I32, I64, BOOL = torch.int32, torch.int64, torch.bool
LOW = (F16, BF16)


# ---- special values ------------------------------------------------------------------------------


def special_values(dtype: torch.dtype) -> list:
    """NaN, +-inf, +-0, denormals, extremes and a few ordinary numbers of ``dtype``."""
    if dtype == BOOL:
        return [True, False]
    if dtype.is_floating_point:
        fi = torch.finfo(dtype)
        denormal = fi.smallest_normal / 4
        return [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -2.5,
            3.0,
            7.25,
            float("inf"),
            float("-inf"),
            float("nan"),
            denormal,
            -denormal,
            fi.smallest_normal,
            fi.max,
            -fi.max,
            1e-3,
        ]
    ii = torch.iinfo(dtype)
    return [0, 1, -1, 2, -2, 3, -7, 100, -100, ii.max, ii.min, ii.max - 1, ii.min + 1]


def _pattern(shape, dtype, j: int) -> torch.Tensor:
    """Operand ``j`` of a spec: element k is ``values[(k // n**j) % n]`` (a different special for
    0-d operands), so operands of one shape meet in every pair (and triple, if large enough)."""
    vals = special_values(dtype)
    n = len(vals)
    numel = int(torch.Size(shape).numel())
    if not shape:
        return torch.tensor(vals[(5 * j + 3) % n], dtype=dtype)
    k = torch.arange(numel)
    idx = (k // n**j) % n
    return torch.tensor(vals, dtype=dtype)[idx].reshape(shape)


def _rows(dtype) -> torch.Tensor:
    """A (n + 4, 11) reduction input: rows of seeded normal numbers holding one or two special
    values each; a row of +inf; +inf/-inf alternating; the largest value (its sum overflows);
    large values of both signs (their variance's m2 overflows the dtype, the variance not)."""
    vals = special_values(dtype)
    n, cols = len(vals), 11
    gen = torch.Generator().manual_seed(0)
    if dtype == BOOL:
        return torch.randint(0, 2, (n + 4, cols), generator=gen).bool()
    if dtype.is_floating_point:
        base = torch.randn(n + 4, cols, generator=gen, dtype=torch.float64)
        big, huge = torch.finfo(dtype).max, torch.finfo(dtype).max ** 0.5 * 2
        extra = [
            [float("inf")] * cols,
            [float("inf"), float("-inf")] * 5 + [1.0],
            [big] * cols,
            [huge, -huge] * 5 + [huge],
        ]
    else:
        base = torch.randint(-50, 50, (n + 4, cols), generator=gen, dtype=torch.int64)
        ii = torch.iinfo(dtype)
        extra = [
            [ii.max] * cols,
            [ii.min] * cols,
            [ii.max, ii.min] * 5 + [0],
            [ii.min, -1] * 5 + [1],
        ]
    out = base.to(dtype)
    for i in range(n):
        out[i, i % cols] = vals[i]
        out[i, (i + 3) % cols] = vals[(i + 5) % n]
    for r, row in enumerate(extra):
        out[n + r] = torch.tensor(
            row, dtype=torch.float64 if dtype.is_floating_point else torch.int64
        ).to(dtype)
    return out


# ---- the families --------------------------------------------------------------------------------

# Specs whose inputs are not data to fill with special values: indices, masks of a fixed count,
# random ops, shape-only factories, views and layout (they move values, compute nothing), and
# extern kernels (matmul, convolution, attention and their backwards: ATen's own kernels run them),
# and loop-ir's direct convolution, whose reference is ATen's convolution: its summation order
# (and whether a padded tap is multiplied at all) is each convolution kernel's own.
# split_reductions
# needs 2**17 elements per graph (too slow in the Triton interpreter); the reduction family covers
# its lowerings on smaller rows.
NOT_DATA = {
    "embedding_gather_index_select",
    "scatter",
    "index_put",
    "index_put_sliced",
    "boolean_mask_read",
    "random",
    "factories",
    "iota_scalar_tensor_empty_permuted",
    "views",
    "views_as_written",
    "cat_split_unbind",
    "slice_scatter",
    "matmuls",
    "addmm_activation",
    "convolution",
    "conv_direct",
    "sdpa",
    "split_reductions",
    "convolution_backward",
    "max_pool2d_backward",
    "avg_pool2d_backward",
    "sdpa_backward",
}
REDUCTIONS = {
    "sum_prod_mean",
    "cumsum",
    "sum_prod_int",
    "amax_amin_max_min",
    "argmax_argmin_max_dim",
    "argmax_ties",
    "any_all",
    "var_dim",
    "var_std_var_mean",
    "max_pool2d",
    "avg_pool2d",
}
INT_DIVISION = {"div_modes", "fmod_remainder_int", "prims_div"}


def _dtypes(spec) -> tuple[torch.dtype, ...]:
    """The spec's dtypes, plus float64 wherever it runs float32."""
    return tuple(spec.dtypes) + ((F64,) if F32 in spec.dtypes and F64 not in spec.dtypes else ())


def _family(spec) -> str:
    if spec.name in REDUCTIONS:
        return "reduction"
    if spec.name in INT_DIVISION:
        return "int_division"
    arity = len(spec.cases(spec.dtypes[0])[0])
    return {1: "unary", 2: "binary"}.get(arity, "ternary")


def _group_key(spec) -> tuple[str, bool, bool]:
    """One graph per key: specs recorded as written (fx) share one; integer division is traced
    as called (its ops are lowered as they are), the rest by family and decomposition."""
    if spec.fx:
        return ("fx", False, True)
    if _family(spec) == "int_division":
        return ("int_division", False, False)
    return (_family(spec), spec.decompose, spec.fx)


GROUPS: dict[tuple[str, bool, bool], list] = {}
for _spec in S.SPECS:
    if _spec.name not in NOT_DATA:
        GROUPS.setdefault(_group_key(_spec), []).append(_spec)


def _group_id(key) -> str:
    family, decompose, fx = key
    return family + ("" if decompose or fx else "-as-called")


# ---- known differences (strict: each must still differ, or the test says to remove it) --------

# (spec name, dtype, code generator) -> why it still differs from eager
_FMOD = (
    "eager's vectorized fmod (and remainder, built on it) returns nan where a / b overflows, "
    "as fmod(FLT_MAX, 0.5); its scalar path, used for tensors under 16 elements, and C's fmod "
    "give the exact 0.0 we give: eager disagrees with itself by tensor length"
)
_ALPHA = (
    "eager's vectorized add/sub with alpha is one fma (a + alpha * b rounded once: "
    "FLT_MAX - 2 * FLT_MAX is -FLT_MAX); loop-ir has no fma op, and the C++ backend keeps "
    "a * b + c unfused (-ffp-contract=off) because two eager ops round twice"
)
_WELFORD_MEAN = (
    "eager's var_mean keeps a running (Welford) mean, which an infinity makes nan "
    "unless it comes last in its lane; ours is the sum's mean (inf), as x.mean() is"
)
# differences that depend on the machine (not strict: they may or may not show)
_HOST_LANES = (
    "codegen-cpp sums a reduction in the host's vector lanes (omp simd, -march=native: AVX2 and "
    "AVX-512 group the values differently); eager's CPU cumsum adds a row in order, and a row "
    "whose large values cancel (x - x + y) shows the order in float64 (float32 accumulates "
    "in float64, as eager's does, which hides it)"
)
MAY_DIFFER: dict[tuple, str] = {("cumsum", F64, "cpp", 0): _HOST_LANES}
# (spec, dtype, code generator) or (spec, dtype, code generator, output index) -> the reason
KNOWN: dict[tuple, str] = {
    ("var_std_var_mean", F64, "triton", 5): _WELFORD_MEAN,
    **{
        ("var_std_var_mean", dt, cg, i): _WELFORD_MEAN
        for dt in (F32, F16, BF16)
        for cg in ("cpp", "triton")
        for i in (5,)
    },
    **{("fmod_remainder", dt, cg): _FMOD for dt in (F32, BF16, F64) for cg in ("cpp", "triton")},
    **{
        ("scalar_forms", dt, cg): _ALPHA
        for dt in (F32, BF16, F64)
        for cg in ("cpp", "triton", "reference")
    },
}


# ---- building and running one family's graph ---------------------------------------------------


def _inputs(spec, dtype, family):
    """(special inputs, random inputs of the same shapes) for one (spec, dtype)."""
    case = spec.cases(dtype)[0]
    randoms = [m() for m in case]
    if family == "reduction":
        if len(randoms[0].shape) != 2:  # pooling: specials every 5th element of its windows
            x = randoms[0].clone()
            vals = special_values(dtype)
            flat = x.view(-1)
            flat[::5] = torch.tensor(vals, dtype=dtype).repeat(flat[::5].numel() // len(vals) + 1)[
                : flat[::5].numel()
            ]
            return [x], randoms
        rows = _rows(dtype)
        return [rows], [torch.zeros_like(rows)]
    # every operand at the full (broadcast) shape, contiguous: eager's vectorized loop, which
    # decides ties of -0. and 0. in max/min/clamp, runs only on such layouts
    full = torch.broadcast_shapes(*[t.shape for t in randoms if t.dim()])
    randoms = [t.expand(full).contiguous() if t.dim() else t for t in randoms]
    special = []
    for j, t in enumerate(randoms):
        if t.dtype == BOOL and dtype != BOOL:  # a condition or a mask: alternate it
            special.append((torch.arange(t.numel()) % 3 == 0).reshape(t.shape))
        else:
            special.append(_pattern(t.shape, t.dtype, j))
    if not dtype.is_floating_point and dtype != BOOL and len(special) >= 2:
        # eager's own truncating division of the minimum by -1 kills the process (SIGFPE)
        a, b = special[0], special[1]
        if a.shape == b.shape:
            b = b.clone()
            b[(a == torch.iinfo(dtype).min) & (b == -1)] = 1
            special[1] = b
    return special, randoms


def _eager_ok(spec, inputs) -> bool:
    try:
        spec.fn(*inputs)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def _build(key):
    """(entries, graph, random example inputs): one entry (spec, dtype, special inputs, number of
    outputs) per (spec, dtype) of the family that eager runs."""
    _, decompose, fx = key
    entries, randoms = [], []
    for spec in GROUPS[key]:
        for dtype in _dtypes(spec):
            special, rnd = _inputs(spec, dtype, _family(spec))
            if not _eager_ok(spec, rnd):
                continue
            nout = len(torch.utils._pytree.tree_leaves(spec.fn(*rnd)))
            entries.append((spec, dtype, special, nout))
            randoms.extend(rnd)
    lens = [len(e[2]) for e in entries]

    def fn(*flat):
        outs, k = [], 0
        for (spec, *_), n in zip(entries, lens):
            outs.extend(torch.utils._pytree.tree_leaves(spec.fn(*flat[k : k + n])))
            k += n
        return tuple(outs)

    if fx:
        gm = OC._fx_graph(fn, randoms)
    else:
        table = L.decompositions() if decompose else {}
        with torch.no_grad():
            gm = make_fx(torch.func.functionalize(fn), decomposition_table=table)(*randoms)
    return entries, fn, gm, randoms


def _references(spec, dtype, inputs):
    """Eager's outputs; for 16-bit floats also eager's in float32 rounded to 16 bits (what a
    fused kernel computes: no rounding between ops, and float32's own special cases such as
    pow(x, 0.5) = sqrt(x)). The compiled outputs must equal one of them."""
    expected = list(torch.utils._pytree.tree_leaves(spec.fn(*inputs)))
    if dtype not in LOW:
        return [expected]
    outs = spec.fn(*[t.float() if t.dtype in LOW else t for t in inputs])
    wide = [r.to(e.dtype) for r, e in zip(torch.utils._pytree.tree_leaves(outs), expected)]
    return [expected, wide]


def _differs(spec, dtype, got, want) -> dict[int, str]:
    """output index -> why ``got`` differs there from eager's ``want``."""
    return {
        i: why
        for i, (g, w) in enumerate(zip(got, want))
        if (why := _output_differs(spec, dtype, i, g, w)) is not None
    }


def _output_differs(spec, dtype, i, g, w) -> str | None:
    if g.shape != w.shape or g.dtype != w.dtype:
        return f"output {i}: {g.shape} {g.dtype} vs eager {w.shape} {w.dtype}"
    if w.dtype.is_floating_point and spec.kind != "exact":
        rtol, atol = spec.tol.get(dtype, OC.DEFAULT_TOL.get(dtype, (0, 0)))
        orr, oat = OC.DEFAULT_TOL[w.dtype]
        rtol, atol = max(rtol, orr), max(atol, oat)
    else:
        rtol, atol = 0, 0
    try:
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        return f"output {i}: {str(e).splitlines()[0]} {_first_mismatch(g, w, rtol, atol)}"
    if w.dtype.is_floating_point:
        zero = w == 0
        if not torch.equal(torch.signbit(g)[zero], torch.signbit(w)[zero]):
            return f"output {i}: the sign of a zero differs ({_first_sign(g, w)})"
    return None


def _first_mismatch(g, w, rtol, atol) -> str:
    if not w.dtype.is_floating_point:
        bad = (g != w).flatten().nonzero()
    else:
        gd, wd = g.double().flatten(), w.double().flatten()
        close = torch.isclose(gd, wd, rtol=rtol, atol=atol, equal_nan=True)
        bad = (~close).nonzero()
    if not len(bad):
        return ""
    k = int(bad[0])
    return f"(first at flat {k}: got {g.flatten()[k].item()!r}, eager {w.flatten()[k].item()!r})"


def _first_sign(g, w) -> str:
    k = int(((torch.signbit(g) != torch.signbit(w)) & (w == 0)).flatten().nonzero()[0])
    return f"flat {k}: got {g.flatten()[k].item()!r}, eager {w.flatten()[k].item()!r}"


_BUILT: dict = {}


def _built(key):
    if key not in _BUILT:
        _BUILT[key] = _build(key)
    return _BUILT[key]


def _without_zero_divisors(entries):
    out = []
    for spec, dtype, special, nout in entries:
        fixed = [
            t
            if j == 0 or t.dtype.is_floating_point or t.dtype == BOOL
            else torch.where(t == 0, torch.ones_like(t), t)
            for j, t in enumerate(special)
        ]
        out.append((spec, dtype, fixed, nout))
    return out


def _backend(codegen):
    return L.ReferenceBackend() if codegen == "reference" else OC._backend(codegen)


@pytest.mark.parametrize("codegen", ["cpp", "triton", "reference"])
@pytest.mark.parametrize("key", list(GROUPS), ids=_group_id)
def test_special_values(key, codegen):
    entries, fn, gm, randoms = _built(key)
    cg = L.compile_graph(gm, randoms, _backend(codegen))
    assert not cg.fallbacks, cg.fallbacks
    problems = []
    if key[0] == "int_division":
        # zero divisors: eager raises, and so must the compiled graph (cpp); then without them
        flat = [t for e in entries for t in e[2]]
        with pytest.raises(RuntimeError) as eager_error:
            fn(*flat)
        known = KNOWN.get(("int_division:zero", None, codegen))
        try:
            cg(*flat)
            raised = None
        except RuntimeError as e:
            raised = e
        same = raised is not None and str(raised) == str(eager_error.value)
        if known is None:
            assert same, f"eager raised {eager_error.value!r}; the compiled graph {raised!r}"
        else:
            assert not same, f"fixed: remove {('int_division:zero', None, codegen)} from KNOWN"
        entries = _without_zero_divisors(entries)
    got = cg(*[t for e in entries for t in e[2]])
    k = 0
    for spec, dtype, special, nout in entries:
        out = list(got[k : k + nout])
        k += nout
        per_ref = [_differs(spec, dtype, out, want) for want in _references(spec, dtype, special)]
        for i in range(nout):
            whys = [d.get(i) for d in per_ref]
            why = None if None in whys else whys[-1]
            known = (spec.name, dtype, codegen) in KNOWN or (spec.name, dtype, codegen, i) in KNOWN
            if (spec.name, dtype, codegen, i) in MAY_DIFFER:
                continue
            if why is not None and not known:
                problems.append(f"{spec.name} {str(dtype).replace('torch.', '')}: {why}")
            elif why is None and (spec.name, dtype, codegen, i) in KNOWN:
                problems.append(
                    f"{spec.name} {dtype} ({codegen}) output {i} now equals eager: "
                    "remove it from KNOWN"
                )
        entry = (spec.name, dtype, codegen)
        if entry in KNOWN and all(None in [d.get(i) for d in per_ref] for i in range(nout)):
            problems.append(
                f"{spec.name} {dtype} ({codegen}) now equals eager: remove it from KNOWN"
            )
    assert k == len(got)
    assert not problems, "differs from eager on special values:\n" + "\n".join(problems)


def test_known_entries_exist():
    """Every KNOWN entry names a (spec, dtype) some family runs (no stale entries)."""
    names = {(s.name, dt) for specs in GROUPS.values() for s in specs for dt in _dtypes(s)}
    stale = [k for k in KNOWN if k[0] != "int_division:zero" and (k[0], k[1]) not in names]
    assert not stale, stale
