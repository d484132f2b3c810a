"""View lowerings: no copies for views of buffers, reindexing for views of computed values."""

from __future__ import annotations

import torch


def test_permute_transpose_expand(check):
    x = torch.randn(3, 5, 7)
    y = torch.randn(5, 1)
    check(
        lambda x, y: (
            x.permute(2, 0, 1) * 2,
            x.transpose(0, 2).contiguous(),
            y.expand(3, 5, 7) + x,
            (x + 1).permute(1, 2, 0) * 3,
        ),
        x,
        y,
    )


def test_view_reshape(check):
    x = torch.randn(6, 10)
    check(
        lambda x: (
            x.view(3, 20) + 1,
            (x * 2).reshape(60),
            x.t().reshape(5, 12) - 1,
            (x.sin().t()).reshape(-1),
        ),
        x,
    )


def test_slice_select_squeeze(check):
    x = torch.randn(7, 9, 1)
    check(
        lambda x: (
            x[1:5, ::2] * 2,
            x[:, 3] + 1,
            x.squeeze(-1)[2:] - 1,
            x.unsqueeze(0) * 3,
            (x + 1)[-3:, 1:8:3],
        ),
        x,
    )


def test_cat_split_unbind(check):
    a, b = torch.randn(3, 4), torch.randn(3, 5)
    check(
        lambda a, b: (
            torch.cat([a, b], 1) * 2,
            torch.cat([a.sin(), a], 0),
            *torch.split(b, 2, 1),
            *torch.unbind(a, 0),
        ),
        a,
        b,
    )


def test_clone_and_as_strided(check):
    x = torch.randn(4, 6)
    check(lambda x: (x.clone(), torch.as_strided(x, (3, 3), (6, 2), 1) * 1), x)


def test_view_outputs_are_views_not_copies(compile_fn):
    x = torch.randn(4, 6)
    cg = compile_fn(lambda x: ((x * 2).t(), x.t()), x)
    got = cg(x)
    torch.testing.assert_close(got[0], (x * 2).t())
    assert got[1].data_ptr() == x.data_ptr() and got[1].stride() == (1, 6)
    assert cg.num_kernels == 1


def test_as_strided_of_computed_values_is_an_index_remap(check):
    # positions are eager's storage positions: x.t() + 1 keeps x.t()'s strides in eager, so its
    # storage order is x's, not the logical order of the transposed shape
    x = torch.randn(5, 6)
    cg = check(
        lambda x: (
            (x + 1).as_strided((4, 3), (3, 1), 2) * 2,
            (x.t() + 1).as_strided((7,), (2,), 1) - 1,
            (x * 3).as_strided((2, 2, 2), (1, 6, 12), 5) + 0,
        ),
        x,
    )
    assert cg.fallbacks == []


def test_as_strided_of_a_sliced_input_counts_offsets_from_the_storage(check):
    base = torch.randn(40)
    x = base[5:29].view(4, 6)  # storage offset 5
    cg = check(lambda x: torch.as_strided(x, (3, 3), (6, 2), 7) * 1, x)
    assert cg.fallbacks == []


def test_as_strided_inplace_from_adaptive_avg_pool_of_channels_last(trace):
    # adaptive_avg_pool2d's composite kernel runs below functionalization and restrides its mean
    # with as_strided_ when the input is channels-last (timm's convnext head)
    import torchkiln_loop_ir as L

    def f(x, w):
        y = torch.nn.functional.adaptive_avg_pool2d(x * w, 1)
        return y.flatten(1) * 2

    x = torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last)
    w = torch.randn(1, 8, 1, 1)
    gm = trace(f, x, w)
    assert any(n.target is torch.ops.aten.as_strided_.default for n in gm.graph.nodes)
    cg = L.compile_graph(gm, [x, w], L.ReferenceBackend())
    assert cg.fallbacks == []
    torch.testing.assert_close(cg(x, w)[0], f(x, w))


def test_as_strided_outside_a_computed_value_falls_back(check):
    # reading past the slice into the rest of mm's result: ATen does it on a view of mm's buffer
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    cg = check(lambda x, w: torch.as_strided(torch.mm(x, w)[:, :2], (2, 3), (3, 1)) * 1, x, w)
    assert cg.fallbacks == ["aten.as_strided"]


def test_slice_scatter_is_a_pointwise_select(check):
    x, s = torch.randn(6, 10), torch.randn(6, 3)
    cg = check(
        lambda x, s: (
            torch.slice_scatter(x, s, 1, 2, 5) * 2,
            torch.slice_scatter(x, s, 1, 1, None, 3) + 1,
            torch.slice_scatter(x.t(), s.t() * 2, 0, -3) - 1,
            torch.slice_scatter(x, x[:2] * 3, 0, 4, 100),
        ),
        x,
        s,
    )
    assert cg.fallbacks == []


def test_slice_backward_of_rotary_halves_has_no_fallback():
    # Llama's rotate_half: the gradient of x[..., :d // 2] and x[..., d // 2:] is slice_scatter
    import torchkiln_loop_ir as L
    from torchkiln_aot_partition import aot_compile

    def rotate(x, cos, sin):
        x1, x2 = x[..., :4], x[..., 4:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    x = torch.randn(2, 3, 8, requires_grad=True)
    cos, sin = torch.randn(3, 8), torch.randn(3, 8)
    gm = torch.fx.symbolic_trace(rotate)
    graphs = []

    def compiler(g, inputs):
        cg = L.compile_graph(g, inputs, L.ReferenceBackend())
        graphs.append(cg)
        return cg

    fn = aot_compile(gm, [x, cos, sin], fw_compiler=compiler, decompositions=L.decompositions())
    out = fn(x, cos, sin)[0]
    grad = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x, grad)
    ref_x = x.detach().requires_grad_()
    (ref,) = torch.autograd.grad(rotate(ref_x, cos, sin), ref_x, grad)
    torch.testing.assert_close(gx, ref)
    assert len(graphs) == 2 and all(g.fallbacks == [] for g in graphs)


def test_as_strided_scatter_into_inputs_and_computed_values(check):
    x, s = torch.randn(4, 6), torch.randn(3, 2)
    cg = check(
        lambda x, s: (
            torch.as_strided_scatter(x, s, (3, 2), (6, 1), 2) * 2,
            torch.as_strided_scatter(x.t() + 1, s * 3, (3, 2), (1, 3), 7) - 1,
            torch.as_strided_scatter(x.exp(), s.t(), (2, 3), (1, 2), 1),
        ),
        x,
        s,
    )
    assert cg.fallbacks == []


def test_channels_last_adaptive_pool_trains_without_fallback():
    # the training graph functionalizes adaptive_avg_pool2d's raw as_strided_ into
    # as_strided_scatter (timm's convnext head): both directions lowered, gradients equal eager's
    import torchkiln_loop_ir as L
    from torchkiln_aot_partition import aot_compile

    def head(x, w):
        return torch.nn.functional.adaptive_avg_pool2d(x * w, 1).flatten(1).square()

    x = torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(1, 8, 1, 1, requires_grad=True)
    graphs = []

    def compiler(g, inputs):
        cg = L.compile_graph(g, inputs, L.ReferenceBackend())
        graphs.append(cg)
        return cg

    fn = aot_compile(
        torch.fx.symbolic_trace(head),
        [x, w],
        fw_compiler=compiler,
        decompositions=L.decompositions(),
    )
    out = fn(x, w)[0]
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, w), grad)
    rx, rw = x.detach().requires_grad_(), w.detach().requires_grad_()
    ref = head(rx, rw)
    torch.testing.assert_close(out, ref)
    for g, e in zip(got, torch.autograd.grad(ref, (rx, rw), grad)):
        torch.testing.assert_close(g, e)
    assert len(graphs) == 2 and all(g.fallbacks == [] for g in graphs)


def test_permute_of_a_stored_tensor_takes_the_layout_view_of_finds():
    """The permute shortcut (strides taken in the new order) gives the layout that view_of's
    sympy expansion gives, for contiguous, transposed, offset, broadcast (stride 0) and size-1
    dimensions, of buffers and of views; a symbolic layout takes view_of's way."""
    import itertools
    import random

    import sympy
    from torchkiln_loop_ir.ir import FixedLayout, InputBuffer, ReinterpretView
    from torchkiln_loop_ir.lowering import views

    rng = random.Random(0)
    layouts = [
        ((2, 3, 4), (12, 4, 1), 0),
        ((2, 3, 4), (1, 2, 6), 0),
        ((2, 1, 4, 5), (20, 20, 5, 1), 7),
        ((3, 1, 1), (1, 9, 3), 2),
        ((4, 6), (0, 1), 0),
        ((5, 2, 3), (6, 3, 1), 30),
    ]
    cpu = torch.device("cpu")
    checked = 0
    for size, stride, offset in layouts:
        layout = FixedLayout(
            cpu,
            torch.float32,
            *(tuple(map(sympy.Integer, v)) for v in (size, stride)),
            sympy.Integer(offset),
        )
        buf = InputBuffer("x", layout)
        for x in (buf, ReinterpretView(buf, layout)):
            perms = list(itertools.permutations(range(len(size))))
            for dims in rng.sample(perms, min(len(perms), 8)):
                new_size = [layout.size[d] for d in dims]
                fast = views._permuted_layout(x, list(dims), new_size)
                inv = [dims.index(i) for i in range(len(dims))]
                slow = views.view_of(x, new_size, lambda idx, inv=inv: [idx[i] for i in inv])
                assert isinstance(fast, ReinterpretView) and isinstance(slow, ReinterpretView)
                assert fast.base is slow.base and fast.layout == slow.layout, (dims, fast, slow)
                checked += 1
    assert checked > 40
    s = sympy.Symbol("s0", positive=True, integer=True)
    symbolic = FixedLayout(cpu, torch.float32, (s, sympy.Integer(3)), (sympy.Integer(3), 1))
    assert views._permuted_layout(InputBuffer("y", symbolic), [1, 0], [3, s]) is None


def test_permutes_of_buffers_and_views_match_eager(check):
    x = torch.randn(2, 1, 4, 6)
    check(
        lambda x: (
            x.permute(3, 1, 0, 2) + 1,
            x[:, :, 1:].permute(2, 0, 3, 1).contiguous(),
            x.expand(3, 2, 1, 4, 6).permute(4, 0, 2, 1, 3) * 2,
            x.transpose(1, 3).transpose(0, 2).reshape(-1),
        ),
        x,
    )


def test_slice_starts_out_of_range_clamp_as_eager(check):
    """A start further back than the dim's size clamps to 0 and one past it to the size, on an
    input and on a computed value (Mistral's sliding-window cache, ``keys[:, :, -4095:]`` of a
    cat of 16 positions: the view's offset came out -4079 rows, and the call raised "invalid
    storage offset"; a value computed from such a slice read every row masked off: zeros)."""

    def fn(a, b):
        c = torch.cat([a, b], dim=2)
        return (
            c[:, :, -4095:, :],
            c[:, :, -4095:, :] * 2,  # computed from the slice: before, masked loads gave zeros
            c[:, :, -3:, :] * 2,
            a[:, :, -100:-2, :],
            c[:, :, 40:, :],
            c[:, :, -100:5, :].sum(),
        )

    for _ in range(2):
        a, b = torch.randn(2, 2, 10, 4), torch.randn(2, 2, 6, 4)
        cg = check(fn, a, b)
        got, expected = cg(a, b), fn(a, b)
        for g, e in zip(got[:1], expected[:1]):  # the view keeps eager's layout
            assert (g.stride(), g.storage_offset()) == (e.stride(), e.storage_offset())
