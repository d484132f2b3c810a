"""Input mutations are written back all or nothing, and metadata mutations are refused at compile
time (they would come back as a copy of values)."""

from __future__ import annotations

import pytest
import torch
from torchkiln_aot_partition import AOTError, MutationAppliedError, aot_compile
from torchkiln_aot_partition.mutation import apply_mutations


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
