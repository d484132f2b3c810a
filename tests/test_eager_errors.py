"""Compiled programs raise the exceptions eager raises, where eager raises them (issue 11; the
fuzzer's "no-error" and error-type cases).

- An op that checks its data (an index in range, an integer divisor non-zero) raises in eager even
  when its result is never used: dead-code elimination keeps it (aot-partition's checks.py) and
  loop-ir computes it.
- index_select, gather, scatter and embedding refuse negative indices (x[i] and index_put wrap).
- An in-place op whose input partially overlaps the tensor it writes is refused by eager.
- When a later op fails at trace time (a shape error), an earlier data error still comes first.

Each case runs eagerly and compiled on fresh inputs; the exception type and message must be
eager's (a compiled graph that raises is replayed eagerly, which raises eager's own error), the
graph stays compiled (no eager fallback), and a valid call afterwards gives eager's values.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln

# Triton runs in its CPU interpreter here, where kernels check indices into a status word
CODEGENS = ["cpp", "triton"]


def _outcome(f, *args):
    try:
        return f(*args), None
    except Exception as e:  # noqa: BLE001 - compared against eager below
        return None, e


def _call_matches_eager(f, compiled, x):
    """One call of ``f`` and of ``compiled`` on clones of ``x`` (same strides): eager's exception
    (type and message) or eager's values, and the input left as eager leaves it. Returns eager's
    exception (None when it computed)."""
    xe, xc = x.clone(), x.clone()
    assert xe.stride() == x.stride() == xc.stride()
    want, want_err = _outcome(f, xe)
    got, got_err = _outcome(compiled, xc)
    assert type(got_err) is type(want_err) and str(got_err) == str(want_err), (want_err, got_err)
    if want_err is None:
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(xc, xe)
    return want_err


def _same_as_eager(fn, bad_args, good_args, codegen="cpp"):
    """``fn`` compiled raises eager's exception on ``bad_args`` (eager must raise), then gives
    eager's values on ``good_args``, without falling back to eager."""
    compiled = torchkiln.compile(fn, options={"codegen": codegen})
    _, want = _outcome(fn, *[a.clone() for a in bad_args])
    assert want is not None, "eager must raise on the bad inputs"
    _, got = _outcome(compiled, *[a.clone() for a in bad_args])
    assert got is not None, f"eager raised {type(want).__name__}: {want}; compiled returned"
    assert type(got) is type(want) and str(got) == str(want), (want, got)
    eager_in, comp_in = [a.clone() for a in good_args], [a.clone() for a in good_args]
    expected, e_err = _outcome(fn, *eager_in)
    assert e_err is None, e_err
    result = compiled(*comp_in)
    for w, g in zip(
        torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(result)
    ):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)
    for w, g in zip(eager_in, comp_in):
        torch.testing.assert_close(g, w)
    assert not torchkiln.report(compiled).eager_fallbacks, torchkiln.report(
        compiled
    ).eager_fallbacks


def dead_index_select(x, i):
    t = torch.index_select(x, 0, i)  # noqa: F841 - unused: eager still checks i
    return x * 2


def dead_gather(x, i):
    t = torch.gather(x, 1, i)  # noqa: F841
    return x.sin()


def dead_getitem(x, i):
    t = x[i]  # noqa: F841
    return x + 1


def dead_embedding(x, i):
    t = torch.nn.functional.embedding(i, x)  # noqa: F841
    return x - 1


def dead_scatter_add(x, i):
    t = x.scatter_add(0, i, torch.ones_like(i, dtype=x.dtype))  # noqa: F841
    return x * 2


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize(
    "fn", [dead_index_select, dead_gather, dead_getitem, dead_embedding, dead_scatter_add]
)
def test_unused_out_of_range_index_raises(fn, codegen):
    x = torch.randn(5, 3)
    two_d = fn in (dead_gather, dead_scatter_add)
    bad = torch.tensor([[1, 9, 0]]) if two_d else torch.tensor([1, 9])
    good = torch.tensor([[1, 2, 0]]) if two_d else torch.tensor([1, 4])
    _same_as_eager(fn, [x, bad], [x, good], codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_unused_index_into_an_empty_dim_raises(codegen):
    """Seeds 40308, 40537, ...: index_select on a dim of size 0 (eager: RuntimeError), dead."""

    def f(x, y, i):
        t = torch.index_select(x, 0, i)  # noqa: F841
        return y.cos()

    x, y = torch.randn(0, 3), torch.randn(4)
    _same_as_eager(
        f, [x, y, torch.tensor([0, 0])], [x, y, torch.zeros(0, dtype=torch.int64)], codegen
    )


@pytest.mark.parametrize("codegen", CODEGENS)
def test_index_read_only_through_an_empty_view_raises(codegen):
    """Seed 780090: index_select into a dim of size 0 whose result is used, but only through an
    empty slice (``t[-1:-1]``), which reads none of it: the fallback kernel still runs (eager
    raises)."""

    def f(x, i, j):
        t = torch.index_select(x, 0, i)
        return torch.gather(t[-1:-1:1], 1, j)

    x, j = torch.zeros(0, 1, dtype=torch.int64), torch.zeros(0, 4, dtype=torch.int64)
    good = torch.zeros(0, dtype=torch.int64)
    _same_as_eager(f, [x, torch.zeros(1, dtype=torch.int64), j], [x, good, j], codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("op", ["take", "getitem", "index_select", "scatter"])
def test_bad_index_read_only_through_an_empty_view_raises(op, codegen):
    """An indexing op whose result is read only through an empty slice: the slice reads none of
    it, and the op's index check ran nowhere (the compiled program returned where eager raises).
    The inputs of a result with no element are computed anyway, as eager computes them."""

    def f(x, i):
        if op == "take":
            t = torch.take(x, i)
        elif op == "getitem":
            t = x[i]
        elif op == "index_select":
            t = torch.index_select(x, 0, i)
        else:
            t = x.scatter(0, i.view(1, 1).expand(1, 3).contiguous(), torch.ones(1, 3))
        return t[-1:-1] * 2

    x = torch.randn(2, 3)
    _same_as_eager(f, [x, torch.tensor([9])], [x, torch.tensor([1])], codegen)


def test_data_error_comes_before_a_later_shape_error():
    """Seeds 20092 and 21846: eager's first error is a dead index_select's; a later op that fails
    at trace time (argmax over an empty dim: IndexError) must not pre-empt it."""

    def f(x, i):
        t = torch.index_select(x, 0, i)  # noqa: F841
        return x.argmax(1)

    x = torch.randn(3, 0)
    compiled = torchkiln.compile(f)
    _, want = _outcome(f, x, torch.tensor([5]))
    _, got = _outcome(compiled, x, torch.tensor([5]))
    assert type(want) is RuntimeError and "out of" in str(want)  # index_select's, not argmax's
    assert type(got) is type(want) and str(got) == str(want), (want, got)
    _, want = _outcome(f, x, torch.tensor([1]))  # in range: argmax's IndexError
    _, got = _outcome(compiled, x, torch.tensor([1]))
    assert type(want) is IndexError and type(got) is IndexError and str(got) == str(want), (
        want,
        got,
    )


@pytest.mark.parametrize("codegen", CODEGENS)
def test_unused_integer_division_by_zero_raises(codegen):
    def f(a, b):
        t = a // b  # noqa: F841
        return a * 3

    a = torch.arange(6)
    _same_as_eager(
        f, [a, torch.tensor([1, 2, 0, 1, 1, 1])], [a, torch.tensor([1, 2, 3, 1, 5, 1])], codegen
    )


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("op", ["index_select", "gather", "embedding", "scatter", "scatter_add"])
def test_negative_index_raises_where_eager_does(op, codegen):
    def f(x, i):
        if op == "index_select":
            return torch.index_select(x, 0, i) * 2
        if op == "gather":
            return torch.gather(x, 0, i.view(-1, 1).expand(-1, 3).contiguous()) * 2
        if op == "embedding":
            return torch.nn.functional.embedding(i, x) * 2
        src = torch.ones(i.shape[0], 3)
        idx = i.view(-1, 1).expand(-1, 3).contiguous()
        return (x.scatter(0, idx, src) if op == "scatter" else x.scatter_add(0, idx, src)) * 2

    x = torch.randn(4, 3)
    _same_as_eager(f, [x, torch.tensor([1, -1])], [x, torch.tensor([1, 3])], codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_negative_getitem_index_still_counts_from_the_end(codegen):
    def f(x, i):
        return x[i] * 2

    x, i = torch.randn(4, 3), torch.tensor([1, -1, -4])
    compiled = torchkiln.compile(f, options={"strict": True, "codegen": codegen})
    torch.testing.assert_close(compiled(x, i), f(x, i))


@pytest.mark.parametrize("codegen", CODEGENS)
def test_inplace_partial_overlap_raises(codegen):
    """Seeds 40409, 40855, 41088, 41256, 41584: ``t = x.unsqueeze(0); t.add_(x)`` (one storage,
    other strides: eager raises whatever the values). Later calls with another input compile."""

    def f(x, y):
        t = x.unsqueeze(0)
        t.add_(y)
        return t.sigmoid()

    compiled = torchkiln.compile(f, options={"codegen": codegen})
    for x in (torch.tensor(1.5), torch.randn(1, 5, 4)):
        xe, xc = x.clone(), x.clone()
        _, want = _outcome(f, xe, xe)
        _, got = _outcome(compiled, xc, xc)
        assert type(want) is RuntimeError and "single memory location" in str(want)
        assert type(got) is RuntimeError and str(got) == str(want), got
        torch.testing.assert_close(xc, xe)  # nothing written before the error
    x, y = torch.randn(3), torch.randn(3)
    xe, xc = x.clone(), x.clone()
    torch.testing.assert_close(compiled(xc, y), f(xe, y))
    torch.testing.assert_close(xc, xe)
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize("layout", ["transposed", "contiguous", "row"])
def test_inplace_add_of_a_reshaped_view_with_a_size_one_dim_is_eagers(layout):
    """Fuzz seed 520584: ``t = x.reshape(x.shape[0], -1); t.add_(x)`` for a [1, 5] input with
    strides (1, 1) (a transposed [5, 1]). Eager's reshape gives ``t`` strides (5, 1), so the
    strides differ and eager raises; fake tensors give (1, 1) and the graph computed an answer.
    A contiguous [1, 5] (same strides in eager: computed) and a [3, 5] (no size-1 dim) too."""

    def f(x):
        t = x.reshape(x.shape[0], -1)
        t.add_(x)
        return t * 2

    make = {
        "transposed": lambda: torch.randn(5, 1, dtype=torch.float64).t(),
        "contiguous": lambda: torch.randn(1, 5, dtype=torch.float64),
        "row": lambda: torch.randn(3, 5, dtype=torch.float64),
    }[layout]
    compiled = torchkiln.compile(f)
    for _ in range(2):
        want_err = _call_matches_eager(f, compiled, make())
    assert (want_err is not None) == (layout == "transposed")  # both eager outcomes were checked
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("rows", [3, 6], ids=["one-row-view", "two-row-view"])
def test_inplace_add_of_a_reshaped_view_of_an_intermediate_is_eagers(rows, codegen):
    """Fuzz seed 791219: ``t3 = (x - 2)[1:-1:3]; t4 = t3.reshape(t3.shape[0], -1);
    t4.add_(t3)``. For 3 rows, t3 is [1, 5] with strides (15, 1) and eager's reshape gives t4
    (5, 1): eager raises. Fake tensors keep (15, 1); the views a graph break hands on are
    rebuilt from the intermediate with eager's strides on their size-1 dims, so Python's check
    raises as eager's. For 6 rows, t3 is [2, 5] (no size-1 dim): the add computes."""

    def f(x):
        t0 = x - 2.0
        t2 = torch.cat([t0, x], 0)
        t3 = t0[1:-1:3]
        t4 = t3.reshape(t3.shape[0], -1)
        t4.add_(t3)
        return t2.amin(dim=1), t4 * 3

    compiled = torchkiln.compile(f, options={"codegen": codegen})
    for _ in range(2):
        want_err = _call_matches_eager(f, compiled, torch.randn(rows, 5))
    assert (want_err is not None) == (rows == 3)  # both eager outcomes were checked
    assert not torchkiln.report(compiled).eager_fallbacks


def test_inplace_full_overlap_is_compiled():
    """The same view on both sides is allowed by eager (``x.add_(x)``) and stays in the graph."""

    def f(x):
        t = x[1:]
        t.mul_(t)
        return x.sum()

    x = torch.randn(5)
    xe, xc = x.clone(), x.clone()
    compiled = torchkiln.compile(f, options={"strict": True})
    torch.testing.assert_close(compiled(xc), f(xe))
    torch.testing.assert_close(xc, xe)
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks, report.graph_breaks


@pytest.mark.parametrize("codegen", CODEGENS)
def test_unused_index_in_a_training_forward_raises(codegen):
    """The partitioner keeps the forward's unused index ops too (aot-partition's extract_graph)."""

    def f(x, w, i):
        t = torch.index_select(w, 0, i)  # noqa: F841
        return (x * w).sum()

    compiled = torchkiln.compile(f, options={"codegen": codegen})
    w = torch.randn(4, 3)
    for idx, raises in (([1, 9], True), ([1, 2], False)):
        grads = []
        for fn in (f, compiled):
            x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
            out, err = _outcome(fn, x, w, torch.tensor(idx))
            grads.append(err if err is not None else (out.backward(), x.grad)[1])
        want, got = grads
        if raises:
            assert type(want) is IndexError and type(got) is IndexError and str(got) == str(want), (
                grads
            )
        else:
            torch.testing.assert_close(got, want)
    assert not torchkiln.report(compiled).eager_fallbacks


def test_partial_overlap_rule_matches_eager():
    """``partially_overlaps`` (capture's copy of ATen's overlap rule) against eager's own check,
    for every pair of same-shaped views of one buffer (dense, transposed, strided, equal)."""
    from torchkiln_dynamo_capture._overlap import partially_overlaps

    base = torch.randn(4, 4)
    views = {
        "a": lambda: base[:2, :2],
        "b": lambda: base[1:3, 1:3],
        "c": lambda: base[:2, 2:],
        "d": lambda: base[2:, :2],
        "t": lambda: base[:2, :2].t(),
        "s": lambda: base[::2, ::2],
        "f": lambda: base.view(16)[:4].view(2, 2),
        "g": lambda: base.view(16)[2:6].view(2, 2),
        "h": lambda: base.view(16)[:4].view(2, 2).t(),
        "i": lambda: base.view(16)[8:12].view(2, 2),
    }
    checked = 0
    for wa, fa in views.items():
        for wb, fb in views.items():
            a, b = fa(), fb()
            try:
                a.add_(b)
                eager_refuses = False
            except RuntimeError as e:
                assert "single memory location" in str(e)
                eager_refuses = True
            assert partially_overlaps(fa(), fb()) == eager_refuses, (wa, wb)
            checked += eager_refuses
    assert checked >= 4  # the rule is exercised both ways


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("n", [0, 3])
def test_an_op_eager_refuses_for_a_dtype_raises_even_on_no_elements(n, codegen):
    """Fuzz seed 80080: ``bitwise_not`` of a float tensor with no elements. Eager refuses the
    dtype before looking at elements (NotImplementedError); a kernel over no elements would have
    returned, so the lowering leaves such ops to ATen (a probe of eager on empty tensors)."""

    def f(x, y):
        return torch.bitwise_not(x * 1.5) + y

    x = torch.ones(2, n, dtype=torch.int64)
    compiled = torchkiln.compile(f, options={"codegen": codegen})
    _, want = _outcome(f, x, 1)
    _, got = _outcome(compiled, x, 1)
    assert type(want) is NotImplementedError and type(got) is type(want) and str(got) == str(want)
    assert not torchkiln.report(compiled).eager_fallbacks
    fine = torch.arange(6).view(2, 3)
    torch.testing.assert_close(
        torchkiln.compile(lambda a: torch.bitwise_not(a) * 2)(fine), torch.bitwise_not(fine) * 2
    )


@pytest.mark.parametrize(
    "op",
    [
        "add_",
        "mul_",
        "copy_",
        "clamp_",
        "exp_",
        "iadd",
        "out",
        "fill_",
        "zero_",
        "masked_fill_",
        "index_fill_",
    ],
)
def test_inplace_write_through_an_expand_is_eagers(op):
    """``x.expand(3, 3).add_(1)``: the written tensor's elements share memory locations, and
    eager's TensorIterator refuses most such writes (RuntimeError "more than one element of the
    written-to tensor refers to a single memory location"), while ``fill_``, ``zero_``,
    ``masked_fill_`` and ``index_fill_`` write. Functionalization computed every one of them:
    the compiled function returned where eager raised. Capture now leaves such a write to Python:
    eager's error, or eager's values and input state."""
    ops = {
        "add_": lambda t: t.add_(1),
        "mul_": lambda t: t.mul_(2),
        "copy_": lambda t: t.copy_(torch.ones(3, 3)),
        "clamp_": lambda t: t.clamp_(0, 1),
        "exp_": lambda t: t.exp_(),
        "iadd": lambda t: t.__iadd__(1),
        "out": lambda t: torch.add(torch.ones(3, 3), 1, out=t),
        "fill_": lambda t: t.fill_(3),
        "zero_": lambda t: t.zero_(),
        "masked_fill_": lambda t: t.masked_fill_(t > 0, 0.5),
        "index_fill_": lambda t: t.index_fill_(1, torch.tensor([0]), 5.0),
    }

    def f(x):
        t = x.expand(3, 3)
        ops[op](t)
        return x * 2 + t.sum()

    compiled = torchkiln.compile(f)
    for _ in range(2):
        _call_matches_eager(f, compiled, torch.randn(3))
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize(
    "case",
    [
        "softmax",
        "log_softmax",
        "gelu",
        "silu",
        "layer_norm",
        "var",
        "lerp",
        "hypot",
        "logcumsumexp",
    ],
)
def test_an_op_without_a_kernel_for_the_dtype_raises(case):
    """``long_tensor.softmax(-1)``: eager raises (NotImplementedError "softmax_lastdim_kernel_impl"
    not implemented for 'Long'; var: RuntimeError "std and var only support floating point");
    meta functions do not check the dtype, so the graph computed an answer. Capture now probes
    eager on tiny real tensors of the same dtypes and leaves the op to Python when eager refuses
    them. A float input right after compiles and gives eager's values."""
    import torch.nn.functional as F

    ops = {
        "softmax": lambda a: a.softmax(-1) * 2,
        "log_softmax": lambda a: F.log_softmax(a, 0) + 1,
        "gelu": lambda a: F.gelu(a) + 1,
        "silu": lambda a: F.silu(a) + 1,
        "layer_norm": lambda a: F.layer_norm(a, (a.shape[-1],)) + 1,
        "var": lambda a: a.var() + 1,
        "lerp": lambda a: torch.lerp(a, a * 2, 0.5) + 1,
        "hypot": lambda a: torch.hypot(a, a) * 2,
        "logcumsumexp": lambda a: a.logcumsumexp(1) + 1,
    }
    fn = ops[case]
    compiled = torchkiln.compile(fn)
    ints = torch.randint(-5, 5, (2, 3))
    _, want = _outcome(fn, ints)
    _, got = _outcome(compiled, ints)
    assert want is not None and type(got) is type(want) and str(got) == str(want), (want, got)
    floats = torch.randn(2, 3)
    torch.testing.assert_close(compiled(floats), fn(floats))
    assert not torchkiln.report(compiled).eager_fallbacks


def test_the_dtype_probe_leaves_integer_reshapes_and_indexing_in_the_graph():
    """The probe runs on sizes cut to 2: a reshape or an index valid only for the real sizes
    fails there, which must not send the op to Python (only complaints about dtypes do)."""

    def f(ids, table):
        flat = ids.view(-1, 4)
        picked = torch.embedding(table, flat)
        return picked.sum(1) + ids.reshape(8, 2).sum()

    compiled = torchkiln.compile(f, options={"strict": True})
    ids, table = torch.randint(0, 10, (2, 8)), torch.randn(10, 3)
    torch.testing.assert_close(compiled(ids, table), f(ids, table))
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks, report.graph_breaks


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
def test_an_unused_op_eager_refuses_for_its_dtype_raises(codegen, train):
    """Seed 789177: ``bitwise_not`` of a float whose result nobody reads. Eager raises
    NotImplementedError before looking at any element (an empty tensor too); the compiled graph
    had dropped the dead node and returned. An integer input is valid, with eager's values."""

    def f(x):
        t = torch.bitwise_not(x + 1)  # noqa: F841 - unused: eager still refuses a float
        return x.float().cos() * 2

    compiled = torchkiln.compile(f, options={"codegen": codegen})
    for x in (torch.randn(4, requires_grad=train), torch.zeros(0)):
        _, want = _outcome(f, x)
        assert isinstance(want, NotImplementedError)
        _, got = _outcome(compiled, x)
        assert type(got) is type(want) and str(got) == str(want), (want, got)
    for i in (torch.arange(5), torch.randint(-9, 9, (7,))):
        torch.testing.assert_close(compiled(i), f(i))
    assert not torchkiln.report(compiled).eager_fallbacks


class _Mixer(torch.nn.Module):
    """A module whose forward breaks the graph (print) before a linear layer the input does not
    fit: the error is raised by ``nn.Linear.forward``'s code, which capture runs as a step of the
    break (a code object in torch's own file)."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = x * 2
        print(end="")
        return self.inner(y)


def test_the_programs_own_error_inside_a_librarys_function_is_eagers():
    """transformers' LiLT (a config whose widths do not fit) raised FailedAfterEffects, not
    eager's RuntimeError: the error came from code capture ran for the program (a step or
    continuation), but its frame is in torch's file, so it read as torchkiln's own failure."""
    model = _Mixer()
    compiled = torchkiln.compile(model)
    for _ in range(2):
        x = torch.randn(3, 5)  # 5 features, the layer takes 8
        with pytest.raises(RuntimeError) as eager:
            model(x)
        with pytest.raises(RuntimeError) as got:
            compiled(x)
        assert str(got.value) == str(eager.value)
    x = torch.randn(3, 8)  # a call that fits still computes
    torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
def test_batch_norm_of_mixed_float_dtypes_raises_as_eagers(train):
    """Fuzz seed 52731: a float32 input normalized with float64 statistics and affine
    parameters. Eager's CPU kernel refuses it (RuntimeError "mixed dtype (CPU): expect parameter
    to have scalar type of Float"); batch norm's meta function does not, and the compiled graph
    computed an answer. Capture now probes eager on tiny real tensors when a call mixes floating
    dtypes. With float32 statistics the same function compiles and gives eager's values (and
    running statistics)."""
    import torch.nn.functional as F

    def f(x, mean, var, weight, bias):
        y = F.batch_norm(x * 2, mean, var, weight, bias, training=train, momentum=0.1)
        return y.relu() + 1

    compiled = torchkiln.compile(f)
    x = torch.randn(4, 3, 5)
    for dtype in (torch.float64, torch.float32):
        stats = [torch.rand(3, dtype=dtype) + 0.5 for _ in range(4)]
        want_stats, got_stats = [s.clone() for s in stats], [s.clone() for s in stats]
        want, want_err = _outcome(f, x, *want_stats)
        got, got_err = _outcome(compiled, x, *got_stats)
        assert type(got_err) is type(want_err) and str(got_err) == str(want_err), (
            want_err,
            got_err,
        )
        if dtype == torch.float64:
            assert isinstance(want_err, RuntimeError) and "mixed dtype" in str(want_err)
        else:
            assert want_err is None
            torch.testing.assert_close(got, want)
        for g, w in zip(got_stats, want_stats):
            torch.testing.assert_close(g, w)
    assert not torchkiln.report(compiled).eager_fallbacks
