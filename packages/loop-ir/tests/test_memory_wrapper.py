"""Buffer planning, the wrapper module, extern kernels and fallbacks."""

from __future__ import annotations

import os

import torch
import torchkiln_loop_ir as L


def _chain(x, m):
    a = (x @ m).sin()
    b = (a @ m).cos()
    c = (b @ m).tanh()
    return ((c @ m) + 1,)


def test_externs_frees_and_reuse(check):
    x, m = torch.randn(5, 5), torch.randn(5, 5)
    cg = check(_chain, x, m, atol=1e-4, rtol=1e-4)
    assert cg.extern_calls == ["aten.mm"] * 4 and cg.fallbacks == []
    frees = [s.name for s in cg.scheduled.steps if isinstance(s, L.Free)]
    assert frees and "del " in cg.wrapper_source
    assert cg.scheduled.reuse  # a later pointwise result reuses a dead one of the same layout
    for new, old in cg.scheduled.reuse.items():
        assert cg.scheduled.buffers[new].size == cg.scheduled.buffers[old].size


def test_wrapper_written_to_cache_dir(compile_fn, tmp_path):
    x = torch.randn(3, 4)
    cg = compile_fn(lambda x: (x + 1,), x)
    assert cg.source_path.startswith(str(tmp_path)) and os.path.exists(cg.source_path)
    with open(cg.source_path) as f:
        assert f.read() == cg.wrapper_source
    y = torch.randn(3, 4)
    torch.testing.assert_close(cg(y)[0], y + 1)  # fresh inputs, same shapes


def test_bmm_addmm_and_fallback_op(check):
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    bias, m1, m2 = torch.randn(5), torch.randn(3, 4), torch.randn(4, 5)
    cg = check(
        lambda a, b, bias, m1, m2: (
            torch.bmm(a, b).relu(),
            torch.addmm(bias, m1, m2) * 2,
            torch.cumprod(m1, 1) + 1,
        ),
        a,
        b,
        bias,
        m1,
        m2,
        atol=1e-5,
        rtol=1e-5,
    )
    assert "aten.bmm" in cg.extern_calls
    assert any("cumprod" in f for f in cg.fallbacks)


def test_cumsum_is_a_reduction_up_to_its_limit(check):
    short, long = torch.randn(3, 100), torch.randn(2, 3000)
    cg = check(
        lambda s, t: (torch.cumsum(s, 1) * 2, torch.cumsum(t, 1) + 1),
        short,
        long,
        atol=1e-3,
        rtol=1e-4,
    )
    assert [f for f in cg.fallbacks if "cumsum" in f] == ["aten.cumsum"]  # the long one only


def test_dead_code_is_eliminated(compile_fn):
    x = torch.randn(4, 4)

    def f(x):
        (x * 3).sum()  # result unused
        return (x + 1,)

    cg = compile_fn(f, x)
    assert cg.num_kernels == 1
    torch.testing.assert_close(cg(x)[0], x + 1)


def test_input_returned_and_constant_output(compile_fn):
    x = torch.randn(4)
    cg = compile_fn(lambda x: (x, x * 2), x)
    out = cg(x)
    assert out[0] is x
    torch.testing.assert_close(out[1], x * 2)


def _transposed_chain(x, m):
    a = x @ m
    b = a.t() @ m  # an extern reads a view of a: a named view whose base is a
    c = b.t() @ m
    d = c.t() @ m
    return (d.t() @ m,)


def test_view_bases_freed_after_their_views_last_use(check):
    """A view's base is freed once the base and every view of it are dead (not at the end): the
    plan holds two mm results at a time, not all five."""
    x, m = torch.randn(64, 64), torch.randn(64, 64)
    cg = check(_transposed_chain, x, m, atol=1e-3, rtol=1e-4)
    views = [s for s in cg.scheduled.steps if isinstance(s, L.View)]
    frees = {s.name for s in cg.scheduled.steps if isinstance(s, L.Free)}
    assert len(views) == 4 and {v.base for v in views} <= frees
    assert L.planned_peak_bytes(cg.scheduled) == 2 * 64 * 64 * 4
    x2, m2 = torch.randn(64, 64), torch.randn(64, 64)  # fresh inputs through the same wrapper
    torch.testing.assert_close(cg(x2, m2)[0], _transposed_chain(x2, m2)[0], atol=1e-3, rtol=1e-4)


def test_returned_view_keeps_its_base(check):
    """A view the graph returns pins its base (never freed, never reused); values stay right with
    the storage reuse around it, on fresh inputs too."""

    def f(x, m):
        p = (x + 1).sin()
        q = p.t() @ m  # reads the view p.t()
        r = (q * 2).cos()  # same layout as p: takes p's dead storage
        s = r.t() @ m
        return (s.t(), (s + 1).exp())

    x, m = torch.randn(32, 32), torch.randn(32, 32)
    cg = check(f, x, m, atol=1e-4, rtol=1e-4)
    out_names = set(cg.scheduled.outputs)
    frees = {s.name for s in cg.scheduled.steps if isinstance(s, L.Free)}
    for v in (s for s in cg.scheduled.steps if isinstance(s, L.View)):
        if v.name in out_names:
            assert v.base not in frees
    x2 = torch.randn(32, 32)
    for got, want in zip(cg(x2, m), f(x2, m)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def _big_temporary(x, w):
    a = (x * 3).sin()  # dies at the mm below; c has its layout
    b = a @ w
    big = (b.unsqueeze(-1) * torch.arange(64.0)).sin().sum(-1)  # a large temporary in between
    c = (b + big).cos()
    return (c @ w,)


def test_reuse_never_raises_the_planned_peak(check):
    """A dead buffer kept for a later output of its layout is held meanwhile: the plan reuses it
    only when that does not raise its peak (here a large temporary sits in between)."""
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    for fn in (_chain, _transposed_chain, _big_temporary):
        args = (torch.randn(5, 5), torch.randn(5, 5)) if fn is _chain else (x, w)
        with_reuse = check(fn, *args, atol=1e-3, rtol=1e-3)
        without = check(
            fn, *args, atol=1e-3, rtol=1e-3, options=L.LoopIROptions(reuse_buffers=False)
        )
        assert not without.scheduled.reuse
        assert L.planned_peak_bytes(with_reuse.scheduled) <= L.planned_peak_bytes(
            without.scheduled
        ), fn


def _residual_block(x, w1, w2):
    h = (x * 2).sin()  # the block's input, alive until the add
    y = h @ w2  # an extern's result
    z = torch.relu(y + h)  # reads y and h at the index it writes; both die here
    return (z @ w1,)


def test_a_pointwise_output_is_written_over_an_input_dying_there(check):
    """A residual add + relu writes into one of its inputs, which die in that kernel (the
    product's result, or the block's input), instead of a new buffer, as torch.compile reuses
    buffers in place: the plan holds two activations there, not three. Each element is read before it is written, by the same iteration; values
    equal eager's on fresh inputs, through the same wrapper, with and without reuse."""
    n = 64
    x, w1, w2 = torch.randn(n, n), torch.randn(n, n) / 8, torch.randn(n, n) / 8
    cg = check(_residual_block, x, w1, w2, atol=1e-4, rtol=1e-4)
    without = check(
        _residual_block,
        x,
        w1,
        w2,
        atol=1e-4,
        rtol=1e-4,
        options=L.LoopIROptions(reuse_buffers=False),
    )
    steps = cg.scheduled.steps
    over = {
        new: old
        for new, old in cg.scheduled.reuse.items()
        if any(isinstance(s, L.KernelSpec) and new in s.outputs and old in s.inputs for s in steps)
    }
    assert over, (cg.scheduled.reuse, cg.wrapper_source)
    for new, old in over.items():  # bound to the input's tensor, its name deleted after the launch
        assert f"{new} = {old}\n" in cg.wrapper_source and f"del {old}" in cg.wrapper_source
    assert L.planned_peak_bytes(cg.scheduled) < L.planned_peak_bytes(without.scheduled)
    for _ in range(2):
        args = (torch.randn(n, n), torch.randn(n, n) / 8, torch.randn(n, n) / 8)
        torch.testing.assert_close(cg(*args)[0], _residual_block(*args)[0], atol=1e-4, rtol=1e-4)


def test_no_write_over_an_input_read_at_another_index(check):
    """``z = y + y.t()`` reads y at two indices: writing z over y would read overwritten values
    in a later iteration, so z gets its own buffer (values equal eager's)."""

    def f(x, w):
        y = x @ w
        return ((y + y.t()).sin() @ w,)

    x, w = torch.randn(32, 32), torch.randn(32, 32)
    cg = check(f, x, w, atol=1e-4, rtol=1e-4)
    steps = cg.scheduled.steps
    for new, old in cg.scheduled.reuse.items():
        assert not any(
            isinstance(s, L.KernelSpec) and new in s.outputs and old in s.inputs for s in steps
        ), cg.wrapper_source
