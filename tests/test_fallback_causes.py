"""Causes of eager fallbacks the fuzzer (tests/fuzz) found, end to end in strict mode (a fallback
raises), each against eager on fresh inputs."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import torchkiln


def _strict(fn, codegen="cpp", dynamic=None):
    return torchkiln.compile(fn, dynamic=dynamic, options={"strict": True, "codegen": codegen})


@pytest.mark.parametrize(
    "make",
    [
        lambda r, c: torch.randn(c, r).t(),
        lambda r, c: torch.randn(r, 2 * c)[:, ::2],
        lambda r, c: torch.randn(2 * r, c)[::2],
        lambda r, c: torch.randn(r, 3 * c + 1)[:, 1::3],
    ],
    ids=["transposed", "column-step", "row-step", "offset-step"],
)
def test_dynamic_input_whose_stride_is_its_own_symbol(make):
    """NameError: name 's37' is not defined (the commonest fallback): a dynamic input whose
    layout shows a symbol only in a stride."""

    def f(x):
        return x.t().cos().sum(0), (x * 2).amax(1, keepdim=True)

    compiled = _strict(f, dynamic=True)
    for r, c in [(5, 4), (7, 3), (3, 9)]:
        x = make(r, c)
        for got, want in zip(compiled(x), f(x)):
            torch.testing.assert_close(got, want)
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_tensor_constant_in_the_function(codegen, dynamic):
    """``torch.tensor([...])`` in the function reached loop-ir as a get_attr node and the graph
    ran eagerly (HF generation with use_cache=True among others)."""

    def f(x, n):
        scale = torch.tensor([0.5, -1.0, 2.0])
        ids = torch.tensor([2, 0, 1])
        return (x * scale)[:, ids] + torch.tensor(1.5), n + torch.tensor([[1], [2]])

    compiled = _strict(f, codegen, dynamic)
    for rows in (4, 6):
        x, n = torch.randn(rows, 3), torch.randint(-3, 3, (2, 5))
        for got, want in zip(compiled(x, n), f(x, n)):
            torch.testing.assert_close(got, want)
    report = torchkiln.report(compiled)
    assert not report.eager_fallbacks and all(
        not g.fallbacks or g.fallbacks == ["aten.index.Tensor"] for g in report.graphs
    )


@pytest.mark.parametrize("dynamic", [None, True])
def test_reshape_of_an_empty_tensor(dynamic):
    """Fusion analysis failed with 'integer modulo by zero' on the reshape of a size-0 tensor."""

    def f(x):
        m = (torch.softmax(x, 2) < x).reshape(x.shape[0], -1)
        return m, torch.sqrt(x.abs()).reshape(-1) + 1, x.permute(2, 0, 1).reshape(3, -1).sum(1)

    compiled = _strict(f, dynamic=dynamic)
    for shape in [(3, 0, 0), (3, 0, 2), (3, 2, 0)]:
        x = torch.randn(shape)
        for got, want in zip(compiled(x), f(x)):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_index_into_an_empty_dim_raises_as_eager(codegen):
    """Fuzz seed 86 killed the process (SIGSEGV, both code generators): an out-of-range index
    is clamped to 0, and a dim of size 0 has no element 0. Eager raises; so must compiled."""

    def f(x, i):
        return torch.index_select(x, 0, i) * 2, x[i] + 1

    compiled = torchkiln.compile(f, options={"codegen": codegen})
    x, i = torch.randn(0, 3), torch.tensor([0, 0])
    with pytest.raises(RuntimeError) as eager:
        f(x, i)
    with pytest.raises(type(eager.value)):
        compiled(x, i)
    x, i = torch.randn(0, 3, 0), torch.tensor([0, 1, 0, 0])  # an empty result: still an error
    with pytest.raises(RuntimeError):
        compiled(x, i)
    x, i = torch.randn(4, 3), torch.tensor([3, 0])  # and a graph of the same code still works
    for got, want in zip(
        torchkiln.compile(f, options={"codegen": codegen, "strict": True})(x, i), f(x, i)
    ):
        torch.testing.assert_close(got, want)


def test_gpt2_with_kv_cache_compiles_its_main_graph():
    """Hugging Face GPT-2 with use_cache=True: its main graph (a tensor constant in the cache
    code) ran eagerly, 'get_attr nodes are not expected in an ATen graph'. Capture still runs one
    cache helper eagerly (issue 15); every graph the backend received must compile."""
    transformers = pytest.importorskip("transformers")
    import warnings

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=256,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    compiled = torchkiln.compile(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = torch.randint(0, 256, (2, 7))
        got, want = compiled(ids, use_cache=True), model(ids, use_cache=True)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-4)
    for (gk, gv), (wk, wv) in zip(
        ((layer.keys, layer.values) for layer in got.past_key_values.layers),
        ((layer.keys, layer.values) for layer in want.past_key_values.layers),
    ):
        torch.testing.assert_close(gk, wk, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(gv, wv, atol=1e-4, rtol=1e-4)
    report = torchkiln.report(compiled)
    assert report.graphs and max(g.fx_nodes for g in report.graphs) > 100  # the main graph
    assert [f.reason for f in report.eager_fallbacks if f.index >= 0] == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pow_half_builds(dtype):
    """float32 pow(x, 0.5) crashed g++ 12 (internal compiler error) through the simd
    declaration of powf, and the graph ran eagerly."""

    def f(x):
        return torch.pow(x, 0.5) + 1, (x.abs() ** 0.5).sum(0), torch.pow(x, 1.7)

    compiled = _strict(f)
    x = torch.rand(64, 33).to(dtype)
    for got, want in zip(compiled(x), f(x)):
        torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_dynamic_tensor_indexing_is_lowered(codegen):
    """``x[idx]`` and ``x[:, idx]`` with dynamic sizes ran ``aten.index.Tensor`` as a fallback
    kernel (the lowering called int() on the indices' symbolic sizes; fuzz seeds 690014,
    690231, 690253)."""

    def f(x, idx, m):
        return x[idx], m[:, idx] * 2, x[idx.view(-1, 1)].flatten()

    compiled = _strict(f, codegen, dynamic=True)
    for n, k in [(5, 4), (7, 3), (6, 9)]:
        x, m = torch.randn(n) > 0, torch.randn(3, n)
        idx = torch.randint(-n, n, (k,))
        for got, want in zip(compiled(x, idx, m), f(x, idx, m)):
            torch.testing.assert_close(got, want)
    assert all(not g.fallbacks for g in torchkiln.report(compiled).graphs)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_cat_of_empty_tensors_is_lowered(codegen, dynamic):
    """``torch.cat`` of legacy empty (0,) tensors only ran as an ATen fallback (fuzz seeds
    690065, 690167); the result is empty, with eager's dtype and shape."""

    def f(x, y):
        t = x != 0.5
        return torch.cat([t, t], 0), torch.cat([x, x * 2], 0) + 1, torch.cat([x, y.flatten()])

    compiled = _strict(f, codegen, dynamic)
    for k in (3, 5):
        x, y = torch.randn(0), torch.randn(k, 2)
        for got, want in zip(compiled(x, y), f(x, y)):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want)
    assert all(not g.fallbacks for g in torchkiln.report(compiled).graphs)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_empty_indices_give_an_empty_result_without_a_fallback(codegen):
    """index_select, embedding and gather with no index (into a dim that may be empty too) ran
    as ATen fallback kernels (fuzz seeds 700015, 700049, 700123); so did an empty result whose
    indices eager still checks and an index into a dim of size 0 (fuzz seeds 780004, 780087,
    780090, ...): a kernel over the indices checks them now, and a bad one raises eager's
    error, with no fallback kernel."""

    def f(x, e, idx):
        return (
            torch.index_select(x, 1, idx),
            torch.index_select(e, 0, idx),
            torch.nn.functional.embedding(idx, x),
            torch.gather(x, 1, idx.view(1, 0).expand(x.shape[0], 0)),
        )

    compiled = _strict(f, codegen)
    for rows in (3, 5):
        x, e, idx = torch.randn(rows, 4), torch.randn(0, 2), torch.zeros(0, dtype=torch.int64)
        for got, want in zip(compiled(x, e, idx), f(x, e, idx)):
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want)
    assert all(not g.fallbacks for g in torchkiln.report(compiled).graphs)

    def g(e, idx):
        return torch.index_select(e, 0, idx) + 1

    e, bad = torch.randn(0, 2), torch.tensor([0, 1])
    with pytest.raises(RuntimeError) as eager:
        g(e, bad)
    compiled_g = torchkiln.compile(g, options={"codegen": codegen})
    with pytest.raises(type(eager.value), match="index_select"):
        compiled_g(e, bad)

    def h(x, idx):  # an empty result (x has no row) whose indices eager checks
        return torch.index_select(x, 1, idx) * 2

    compiled_h = torchkiln.compile(h, options={"codegen": codegen})
    x = torch.randn(0, 4)
    for idx in (torch.tensor([3, 0]), torch.tensor([1, 2, 3])):  # in range: an empty result
        got, want = compiled_h(x, idx), h(x, idx)
        assert got.shape == want.shape and got.dtype == want.dtype
    with pytest.raises(RuntimeError) as eager:
        h(x, torch.tensor([4]))
    with pytest.raises(type(eager.value)) as got:
        compiled_h(x, torch.tensor([4]))
    assert str(got.value) == str(eager.value)
    for fn in (compiled_g, compiled_h):
        report = torchkiln.report(fn)
        assert all(not gr.fallbacks for gr in report.graphs), report.graphs
        assert not report.eager_fallbacks


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_statistics_of_nothing_are_nan_without_a_fallback(codegen):
    """var, var_mean, std and a layer norm over an empty dim ran as ATen fallback kernels (13 of
    1500 fuzzed programs from seed 783000): the mean of nothing is 0 / 0, and so is its
    variance, NaN as eager's (eager warns about the degrees of freedom)."""

    def f(x):
        v, m = torch.var_mean(x, -1, correction=0)
        return (
            v,
            m,
            x.var(-1),
            x.std(-1, keepdim=True),
            torch.nn.functional.layer_norm(x, x.shape[-1:]),
        )

    compiled = _strict(f, codegen)
    for rows in (1, 3):
        x = torch.randn(rows, 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager's degrees-of-freedom warning
            want = f(x)
        for got, w in zip(compiled(x), want):
            assert got.shape == w.shape and got.dtype == w.dtype
            torch.testing.assert_close(got, w, equal_nan=True)
    assert all(not g.fallbacks for g in torchkiln.report(compiled).graphs)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_size_expressions_as_scalar_operands_without_a_fallback(codegen):
    """With dynamic shapes a size expression (``s0 - 4``) is a scalar operand of a comparison or
    arithmetic op; its dtype promotion took ``int()`` of it, which raises, and the op ran as an
    ATen fallback (``aten.eq.Scalar``, fuzz seed 783089). Against eager at two sizes."""

    def f(x):
        n = x.shape[0]
        i = torch.arange(n)
        return i == (n - 4), i < (n - 1), x * (n - 1), i + (n - 2)

    compiled = _strict(f, codegen, dynamic=True)
    for n in (8, 11):
        x = torch.randn(n)
        for got, want in zip(compiled(x), f(x)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want)
    assert all(not g.fallbacks for g in torchkiln.report(compiled).graphs)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_scatters_and_indexing_over_no_element_compile(codegen):
    """Training fuzz seed 751: the backward of ``index_select`` over a dim of size 0 is an
    ``index_put`` over no element, and the lowering accepted it, then raised ``Unlowerable``
    when the scheduler recorded its body (``indirect`` into a dim of size 0): the compiled
    backward failed. Over no element a scatter writes nothing (the copy of its target), and
    the size-0 checks happen at lowering time."""

    def f(x, idx, e, v):
        return (
            x[:, idx],  # an empty result: idx has no element
            e.index_put((idx,), v, accumulate=True),  # no element written
            e.t().scatter_add(1, idx.view(1, 0).expand(3, 0), e.t()),
        )

    compiled = _strict(f, codegen)
    x, idx, e, v = (
        torch.randn(2, 3),
        torch.zeros(0, dtype=torch.int64),
        torch.randn(0, 3),
        torch.randn(0, 3),
    )
    for got, want in zip(compiled(x, idx, e, v), f(x, idx, e, v)):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want)

    def g(w, idx):
        return torch.index_select(w, 1, idx).sum() + w.sum()

    compiled_g = _strict(g, codegen)
    w = torch.randn(3, 0, dtype=torch.float64, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    got, want = compiled_g(w * 1, idx), g(w2 * 1, idx)
    torch.testing.assert_close(got, want)
    (g1,) = torch.autograd.grad(got, [w])
    (g2,) = torch.autograd.grad(want, [w2])
    torch.testing.assert_close(g1, g2)
    assert all(not gr.fallbacks for gr in torchkiln.report(compiled).graphs)


def _flatten_written(x):
    t = x.flatten()
    t.add_(1)  # x written in grad mode, through a view of it
    return t[-38:39:3]


def test_a_size_product_the_forward_and_backward_share_is_recomputed():
    """Under dynamic shapes, ``s0 * s1`` (the flatten's size) was one node for the forward's view
    and the backward's write-back view (CSE): an ``operator.mul`` the cut took for an op it may
    not recompute, and may not save (a size, not a tensor), so no finite cut existed and the
    graph ran eagerly (training fuzz seed 9647). Size arithmetic is now recomputed."""
    compiled = _strict(_flatten_written, dynamic=True)
    for shape in ((5, 7), (4, 9), (6, 3)):
        x0, g = torch.randn(shape), torch.randn(shape[0] * shape[1])
        per = []
        for fn in (_flatten_written, compiled):
            leaf = x0.clone().requires_grad_()
            x = leaf * 1
            out = fn(x)
            (out * g[: out.numel()]).sum().backward(retain_graph=True)
            (x * 3).sum().backward()
            per.append((out.detach(), x.detach(), leaf.grad))
        for got, want in zip(per[1], per[0]):
            torch.testing.assert_close(got, want)
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_gradient_of_an_index_of_dynamic_length(codegen):
    """The backward of ``x[idx]`` is ``index_put(zeros, [idx], grad, accumulate=True)``: with a
    dynamic number of indices its lowering called ``int()`` on the symbolic size and ran ATen's
    op as a fallback kernel (fuzz seed 52973, layout shares)."""

    def f(x, idx, w):
        return torch.nn.functional.layer_norm(x[idx] * w, (x.shape[-1],))

    compiled = _strict(f, codegen, dynamic=True)
    for n in (4, 7):
        x = torch.randn(5, 6, requires_grad=True)
        w = torch.randn(6, requires_grad=True)
        idx = torch.randint(0, 5, (n,))
        idx[0] = idx[1]  # a repeated index: its gradients add up
        grad = torch.randn(n, 6)
        got = compiled(x, idx, w)
        want = f(x, idx, w)
        torch.testing.assert_close(got, want)
        got_grads = torch.autograd.grad(got, (x, w), grad)
        want_grads = torch.autograd.grad(want, (x, w), grad)
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, b)
    report = torchkiln.report(compiled)
    assert not report.eager_fallbacks
    assert all(not g.fallbacks for g in report.graphs)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gradient_of_an_index_into_16_bit_floats(codegen, dtype):
    """The gradient of an embedding or ``x[idx]`` in a 16-bit model is an accumulating scatter
    into 16-bit floats, which no backend adds atomically: it ran as ATen's kernel (fuzz seed
    960250). It now accumulates in a float32 copy, rounded once: checked against float64."""

    def f(x, idx, table):
        return torch.nn.functional.embedding(idx, table) * x[idx].sum(-1, keepdim=True)

    compiled = _strict(f, codegen)
    x = torch.randn(5, 6, dtype=dtype, requires_grad=True)
    table = torch.randn(9, 6, dtype=dtype, requires_grad=True)
    idx = torch.tensor([3, 1, 3, 3, 0, 1, 4])  # repeated: their gradients add up
    grad = torch.randn(7, 6, dtype=dtype)
    got = torch.autograd.grad(compiled(x, idx, table), (x, table), grad)
    x64, table64 = (t.detach().double().requires_grad_() for t in (x, table))
    want = torch.autograd.grad(f(x64, idx, table64), (x64, table64), grad.double())
    eager = torch.autograd.grad(f(x, idx, table), (x, table), grad)
    for g, w, e in zip(got, want, eager):
        # as close to float64 as eager's 16-bit result is (it rounds after every add)
        err = (g.double() - w).abs().max()
        assert err <= 2 * (e.double() - w).abs().max() + 4 * torch.finfo(dtype).eps * w.abs().max()
    report = torchkiln.report(compiled)
    assert not report.eager_fallbacks
    assert all(not g.fallbacks for g in report.graphs)
