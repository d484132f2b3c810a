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
