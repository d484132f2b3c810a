"""Mutated inputs written in place (in_place.py): the kernel computing an input's new value stores
it into the input, the compiled graph returns the input itself there, and every other output is
eager's, computed from the input's old values; writes that would be unsafe are not made."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx


def _compile(fn, inputs, pairs, backend=None):
    gm = make_fx(fn, decomposition_table=L.decompositions())(*inputs)
    gm.meta["mutations_in_place"] = pairs
    return L.compile_graph(gm, list(inputs), backend or L.ReferenceBackend())


def _run(cg, fn, inputs, mutated):
    """Call ``cg`` on copies of ``inputs``; check every output against eager, and that each
    input in ``mutated`` (input position -> output position) is returned (and written) or its
    value returned for the caller to copy. Returns the positions written in place."""
    args = [t.clone() for t in inputs]
    expected = fn(*[t.clone() for t in inputs])
    got = cg(*args)
    written = set()
    for k, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5, msg=f"output {k}")
    for i, k in mutated.items():
        if got[k] is args[i]:
            written.add(i)
        else:  # not written in place: the input keeps its old values
            torch.testing.assert_close(args[i], inputs[i])
    return written


def _batch_norm_stats(x, rm, rv, n):
    var, mean = torch.var_mean(x, dim=0, correction=0)
    out = (x - mean) * torch.rsqrt(var + 1e-5)
    return out, rm * 0.9 + mean * 0.1, rv * 0.9 + var * (x.shape[0] / (x.shape[0] - 1)) * 0.1, n + 1


def test_running_statistics_are_written_into_the_inputs():
    inputs = [torch.randn(16, 5), torch.randn(5), torch.rand(5), torch.tensor(3)]
    cg = _compile(_batch_norm_stats, inputs, ((1, 1), (2, 2), (3, 3)))
    assert set(cg.scheduled.reuse.items()) >= {
        (cg.scheduled.outputs[1], cg.scheduled.inputs[1]),
        (cg.scheduled.outputs[2], cg.scheduled.inputs[2]),
        (cg.scheduled.outputs[3], cg.scheduled.inputs[3]),
    }
    assert _run(cg, _batch_norm_stats, inputs, {1: 1, 2: 2, 3: 3}) == {1, 2, 3}
    assert "inputs_written_in_place" in cg.wrapper_source


def test_without_the_meta_nothing_is_written_in_place():
    inputs = [torch.randn(16, 5), torch.randn(5), torch.rand(5), torch.tensor(3)]
    cg = _compile(_batch_norm_stats, inputs, ())
    assert not set(cg.scheduled.reuse.values()) & set(cg.scheduled.inputs)
    assert _run(cg, _batch_norm_stats, inputs, {1: 1, 2: 2, 3: 3}) == set()
    assert "inputs_written_in_place" not in cg.wrapper_source


def _read_elsewhere(x, m):
    # the old m is read at other indices (flipped) and by a reduction: its new value must not
    # land in m before those reads
    return (m.flip(0) * x).sum(0), m.sum(), m + 1


def _returned_twice(x, m):
    new = m * 2 + x
    return new, new  # also a user output: the caller copies


def _input_returned(x, m):
    return m, x + m  # the graph returns the input itself as well as its new value


def _transposed_new_value(x, m):
    return x.sum(), (m.t() + x).t().contiguous()  # a new value in another layout


@pytest.mark.parametrize(
    "fn, mutated",
    [(_read_elsewhere, {1: 2}), (_returned_twice, {1: 1}), (_input_returned, {1: 1})],
)
def test_unsafe_or_aliased_writes_stay_copies_and_results_match_eager(fn, mutated):
    inputs = [torch.randn(6, 6), torch.randn(6, 6)]
    pairs = tuple((k, i) for i, k in mutated.items())
    cg = _compile(fn, inputs, pairs)
    written = _run(cg, fn, inputs, mutated)
    if fn is not _read_elsewhere:
        assert written == set()


def test_a_new_value_of_another_layout_is_returned_for_the_caller_to_copy():
    inputs = [torch.randn(4, 6), torch.randn(6, 4).t()]
    cg = _compile(lambda x, m: (x.sum(), m + x), inputs, ((1, 1),))
    # written through the input's strides when the value has them, else copied by the caller
    assert _run(cg, lambda x, m: (x.sum(), m + x), inputs, {1: 1}) <= {1}
    cg = _compile(_transposed_new_value, [torch.randn(4, 4), torch.randn(4, 4)], ((1, 1),))
    assert _run(cg, _transposed_new_value, [torch.randn(4, 4), torch.randn(4, 4)], {1: 1}) <= {1}


def test_an_int64_counter_is_incremented_in_place():
    inputs = [torch.randn(3), torch.tensor(7)]
    cg = _compile(lambda x, n: (x * 2, n + 1), inputs, ((1, 1),))
    args = [t.clone() for t in inputs]
    for step in range(3):
        out = cg(*args)
        assert out[1] is args[1] and int(args[1]) == 8 + step


def test_an_error_after_an_input_was_written_is_marked():
    # nonzero's data-dependent size, traced as 4, differs at run time: the wrapper raises after
    # the kernel wrote m's new value into m, and says so (the caller must not run it again)
    def fn(x, m):
        new = m + 1
        return x * 2, new, torch.nonzero(new > 1.5)

    m = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    gm = make_fx(fn, decomposition_table=L.decompositions(), tracing_mode="real")(torch.ones(6), m)
    gm.meta["mutations_in_place"] = ((1, 1),)
    cg = L.compile_graph(gm, [torch.ones(6), m], L.ReferenceBackend())
    assert cg.scheduled.reuse.get(cg.scheduled.outputs[1]) == cg.scheduled.inputs[1]
    args = [torch.randn(6), torch.ones(6)]
    with pytest.raises(L.OutputShapeChanged) as info:
        cg(*args)
    assert getattr(info.value, "inputs_written_in_place", False)
    assert args[1].tolist() == [2.0] * 6  # written in place before the error


def test_a_backend_that_does_not_declare_the_feature_gets_no_in_place_write():
    class OldBackend(L.ReferenceBackend):
        supports_in_place_inputs = False  # a code generator built before the feature

    inputs = [torch.randn(16, 5), torch.randn(5), torch.rand(5), torch.tensor(3)]
    cg = _compile(_batch_norm_stats, inputs, ((1, 1), (2, 2), (3, 3)), OldBackend())
    assert not set(cg.scheduled.reuse.values()) & set(cg.scheduled.inputs)
    assert _run(cg, _batch_norm_stats, inputs, {1: 1, 2: 2, 3: 3}) == set()


def test_a_new_value_that_does_not_read_the_input():
    # m.fill_(x.sum()): the kernel writes m without reading it
    def fn(x, m):
        return x * 2, torch.zeros_like(m) + x.sum()

    inputs = [torch.randn(4, 5), torch.randn(3, 2)]
    cg = _compile(fn, inputs, ((1, 1),))
    assert _run(cg, fn, inputs, {1: 1}) == {1}
