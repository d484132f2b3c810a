"""Input mutations are written back all or nothing, and metadata mutations are refused at compile
time (they would come back as a copy of values)."""

from __future__ import annotations

import pytest
import torch
from torchkiln_aot_partition import AOTError, MutationAppliedError, aot_compile
from torchkiln_aot_partition.mutation import WRITE_BACK, apply_mutations


def test_a_bad_new_value_fails_before_any_input_is_written():
    a, b = torch.zeros(3), torch.zeros(4)
    with pytest.raises(AOTError, match="mutated graph input 1"):
        apply_mutations([a, b], (0, 1), [torch.ones(3), torch.ones(5)])
    assert a.tolist() == [0.0, 0.0, 0.0]  # untouched: the check ran before the first write


def test_a_new_value_sharing_memory_with_an_input_is_read_before_it_is_overwritten():
    # input 0 gets input 1's old values and input 1 gets input 0's: a swap through one storage
    buf = torch.arange(6.0)
    a, b = buf[:3], buf[3:]
    apply_mutations([a, b], (0, 1), [b, a])
    assert buf.tolist() == [3.0, 4.0, 5.0, 0.0, 1.0, 2.0]


def test_an_input_eager_cannot_write_fails_before_any_input_is_written():
    a = torch.zeros(3)
    b = torch.zeros(1).expand(3)  # its elements share one memory location
    with pytest.raises(AOTError, match="share one memory location"):
        apply_mutations([a, b], (0, 1), [torch.ones(3), torch.ones(3)])
    assert a.tolist() == [0.0, 0.0, 0.0]


class _FailingWrite(torch.Tensor):
    def copy_(self, *args, **kwargs):
        raise RuntimeError("device lost")


def test_a_failing_write_says_inputs_may_be_half_written():
    a, b = torch.zeros(3), torch.zeros(3).as_subclass(_FailingWrite)
    with pytest.raises(MutationAppliedError, match="part way.*device lost"):
        apply_mutations([a, b], (0, 1), [torch.ones(3), torch.ones(3)])
    assert a.tolist() == [1.0, 1.0, 1.0]  # written before the failure: the caller must not repeat


def test_metadata_mutation_is_refused(compiler, capture):
    def fn(a, x):
        a.add_(1)
        x.t_()
        return (a * 2,)

    with pytest.raises(AOTError, match="sizes or strides changed in place"):
        aot_compile(capture(fn), [torch.zeros(3), torch.randn(3, 3)], fw_compiler=compiler)
    assert not compiler.graphs


@pytest.mark.parametrize("partition", ["min_cut", "default"])
def test_a_no_grad_write_to_an_input_that_requires_grad(partition, compiler):
    """nn.init.*_ on a parameter: a write under no_grad to a leaf that requires grad (autograd
    allows it). Compiled, with the gradient reaching the input through its new value as in eager;
    the mutated input itself is never saved for the backward (the write-back after the forward
    would make autograd refuse it), whichever partitioner."""
    from torchkiln_aot_partition.partition import default_partition, min_cut_partition

    def f(w, x):
        with torch.no_grad():
            w.fill_(0.25).add_(x.sum())
        return (torch.tanh(x @ w),)

    # capture's form of the no_grad block (fx.symbolic_trace would run it instead of recording it)
    graph = torch.fx.Graph()
    w, x = graph.placeholder("w"), graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    filled = graph.call_method("fill_", (w, 0.25))
    graph.call_method("add_", (filled, graph.call_method("sum", (x,))))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output((graph.call_function(torch.tanh, (graph.call_function(torch.matmul, (x, w)),)),))
    fn = min_cut_partition if partition == "min_cut" else default_partition
    w_c = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(3, 4)
    compiled = aot_compile(
        torch.fx.GraphModule(torch.nn.Module(), graph),
        [w_c, x],
        fw_compiler=compiler,
        partition_fn=fn,
    )
    for _ in range(2):  # fresh inputs
        x = torch.randn(3, 4)
        w_c = torch.randn(4, 4, requires_grad=True)
        w_e = w_c.detach().clone().requires_grad_(True)
        (got,) = compiled(w_c, x)
        (want,) = f(w_e, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(w_c, w_e)
        g = torch.randn_like(want)
        got.backward(g)
        want.backward(g)
        torch.testing.assert_close(w_c.grad, w_e.grad)
    fw = compiler.graphs[0]
    saved = set(fw.meta["partition"].saved)
    first = next(n.name for n in fw.graph.nodes if n.op == "placeholder")
    assert first not in saved


# -- mutated inputs written in place (contract C2's gm.meta["mutations_in_place"]) -------------


def test_an_input_returned_as_its_own_new_value_is_not_copied_but_its_version_moves():
    a, b = torch.zeros(3), torch.zeros(3)
    a.add_(2)  # a's new value, written by the "graph" itself
    before = (WRITE_BACK.copies, WRITE_BACK.in_place, a._version, b._version)
    apply_mutations([a, b], (0, 1), [a, torch.ones(3)])
    assert (WRITE_BACK.copies - before[0], WRITE_BACK.in_place - before[1]) == (1, 1)
    assert a._version > before[2] and b._version > before[3]  # as a copy_ bumps it
    assert a.tolist() == [2.0] * 3 and b.tolist() == [1.0] * 3


def test_a_bad_new_value_after_an_in_place_write_says_inputs_were_written():
    a, b = torch.zeros(3), torch.zeros(4)
    with pytest.raises(MutationAppliedError, match="in place"):
        apply_mutations([a, b], (0, 1), [a, torch.ones(5)])


class InPlaceCompiler:
    """Runs the graph as is (the ``compiler`` fixture: checks C2), then does what a compiler
    writing in place does for every pair of ``gm.meta["mutations_in_place"]``: the new value
    goes into the input, which is returned."""

    def __init__(self, inner):
        self.inner = inner
        self.graphs = inner.graphs

    def __call__(self, gm, example_inputs):
        run = self.inner(gm, example_inputs)
        pairs = gm.meta.get("mutations_in_place", ())

        def call(*args):
            outs = list(run(*args))
            for k, i in pairs:
                args[i].copy_(outs[k])
                outs[k] = args[i]
            return outs

        return call


class _BatchNorm(torch.nn.BatchNorm1d):
    # nn.BatchNorm1d's input-dim check is control flow fx cannot trace (capture handles it)
    def forward(self, x):
        self.num_batches_tracked.add_(1)
        return torch.nn.functional.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, True, 0.1, 1e-5
        )


def _bn_net():
    return torch.nn.Sequential(torch.nn.Linear(5, 6), _BatchNorm(6), torch.nn.ReLU(), _BatchNorm(6))


@pytest.mark.parametrize("grad", [True, False], ids=["training", "no_grad"])
def test_batch_norm_statistics_are_written_in_place_for_several_steps(grad, capture, compiler):
    import copy

    model = _bn_net().train()
    ref = copy.deepcopy(model)
    ref64 = copy.deepcopy(model).double()
    compiler = InPlaceCompiler(compiler)
    x0 = torch.randn(8, 5)
    with torch.set_grad_enabled(grad):
        compiled = aot_compile(capture(model), [x0], fw_compiler=compiler)
    pairs = compiler.graphs[0].meta["mutations_in_place"]
    assert len(pairs) == 6  # running mean, running var and the counter of both norms
    for _ in range(3):
        x = torch.randn(8, 5)
        before = (WRITE_BACK.copies, WRITE_BACK.in_place)
        with torch.set_grad_enabled(grad):
            (out,) = compiled(x)
            expected = ref(x)
            exact = ref64(x.double())
        assert (WRITE_BACK.copies - before[0], WRITE_BACK.in_place - before[1]) == (0, 6)
        torch.testing.assert_close(out, expected)
        if grad:
            for y in (out, expected, exact):
                y.square().sum().backward()
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, msg=name)
    if grad:
        # The first norm's gradients are sums that cancel to about 1e-3 of the last norm's
        # weight gradient (about 48): float32's rounding then reads 0.5% of them, so each is
        # checked against float64 eager, to within twice float32 eager's own distance from it
        # and a few roundings of the model's largest gradient
        params = list(zip(model.parameters(), ref.parameters(), ref64.parameters()))
        scale = max(float(d.grad.abs().max()) for _, _, d in params)
        for name, (p, q, d) in zip(dict(model.named_parameters()), params):
            ours = float((p.grad.double() - d.grad).abs().max())
            eager = float((q.grad.double() - d.grad).abs().max())
            assert ours <= 2 * eager + 1e-6 * scale, (name, ours, eager, scale)


def test_a_compiler_ignoring_the_meta_still_gets_every_mutation_copied(compiler, capture):
    import copy

    model = _bn_net().train()
    ref = copy.deepcopy(model)
    compiled = aot_compile(capture(model), [torch.randn(8, 5)], fw_compiler=compiler)
    x = torch.randn(8, 5)
    before = WRITE_BACK.copies
    torch.testing.assert_close(compiled(x)[0], ref(x))
    assert WRITE_BACK.copies - before == 6
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, msg=name)


def test_inputs_not_offered_for_in_place_writes(capture, compiler):
    """An input that is returned, or whose new value is returned or saved for the backward, or
    that requires grad, is not offered: the runtime copies its new value as before."""

    def returned(a, x):
        a.add_(1)
        return (a, x * 2)

    def value_returned(a, x):
        b = a.add_(1) * 1
        return (b, a + x)

    def saved(a, w):  # a's new value is what w's gradient needs
        a.mul_(2)
        return ((a * w).sum(),)

    for fn, grad in [(returned, False), (value_returned, False), (saved, True)]:
        recording = InPlaceCompiler(type(compiler)())
        w = torch.randn(3, requires_grad=grad)
        aot_compile(capture(fn), [torch.randn(3), w], fw_compiler=recording)
        meta = recording.graphs[0].meta["mutations_in_place"]
        assert not any(i == 0 for _, i in meta) or fn is value_returned, fn.__name__
    # a mutated input that requires grad (a no_grad write to a leaf, capture's form) is not
    graph = torch.fx.Graph()
    w, x = graph.placeholder("w"), graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    graph.call_method("add_", (w, 1.0))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output((graph.call_function(torch.mul, (x, w)),))
    recording = InPlaceCompiler(type(compiler)())
    w_c = torch.randn(3, requires_grad=True)
    compiled = aot_compile(
        torch.fx.GraphModule(torch.nn.Module(), graph),
        [w_c, torch.randn(3)],
        fw_compiler=recording,
    )
    assert recording.graphs[0].meta["mutations_in_place"] == ()
    x = torch.randn(3)
    (out,) = compiled(w_c, x)
    torch.testing.assert_close(out, x * w_c)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_an_error_after_an_in_place_write_is_never_run_again(grad, capture):
    def fn(a, x):
        a.add_(1)
        return (x * 2,)

    def compiler(gm, example_inputs):
        def call(*args):
            error = RuntimeError("kernel failed")
            error.inputs_written_in_place = True
            raise error

        return call

    x = torch.randn(3, requires_grad=grad)
    compiled = aot_compile(capture(fn), [torch.zeros(3), x], fw_compiler=compiler)
    with pytest.raises(MutationAppliedError, match="kernel failed"):
        compiled(torch.zeros(3), x)
