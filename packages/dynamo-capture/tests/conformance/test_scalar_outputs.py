"""``.item()`` / ``.tolist()`` with ``capture_scalar_outputs``: unbacked symbolic values in one
graph (off by default, as in TorchDynamo: then the call breaks the graph).

The programs run through the conformance harness with the option on (``PEER=dynamo`` runs them
under ``torch._dynamo.config.capture_scalar_outputs``, which is how the graph counts were
checked). New values on later calls must not recompile: the value is data in the graph.

Known peer differences, kept on purpose: TorchDynamo 2.13 refuses ``tolist()`` of a float
tensor (``tolist_unpack``, ``tolist_2d``: a graph break there), and recompiles
``item_int_arange`` when the value turns 0; torchkiln keeps both in its one graph.
"""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import PEER, Program, RecordingBackend, _one_run, ids, randn

ACC: list = []


def item_scale(x, y):
    s = x.sum().item()
    return y * s + s * 2


def item_arithmetic(x):
    a = x.max().item()
    b = x.min().item()
    return x * (a - b) / (a + 1.5) + a * b


def item_int_full(x, idx):
    n = idx.max().item()
    torch._check(n >= 0)
    return torch.full((n,), 2.0), x * n


def item_int_is_size_zeros(idx):
    n = idx.sum().item()
    torch._check_is_size(n)
    return torch.zeros(n, 3) + 1


def item_view_with_check(x, k):
    n = k.item()
    torch._check(n > 0)
    torch._check(x.numel() % n == 0)
    return x.view(n, -1).sum(1)


def item_int_arange(k):
    n = k.item()
    torch._check(n >= 0)
    return torch.arange(n) * 2


def item_returned(x):
    s = x.sum().item()
    return x * 2, s + 1, s > 0


def item_int_returned(k):
    n = k.item()
    return k * 2, n * 3 + 1


def tolist_unpack(x, y):
    a, b = y.tolist()
    return x * a - b


def tolist_2d(x, y):
    rows = y.tolist()
    return x * rows[0][1] + rows[1][0]


def tolist_int_sizes(x, sizes):
    a, b = sizes.tolist()
    torch._check_is_size(a)
    torch._check_is_size(b)
    return torch.ones(a, b) * x.sum(), a + b


def item_bool(x):
    flag = (x.sum() > 0).item()
    return x * flag


def item_in_comprehension(x, ys):
    scales = [y.sum().item() for y in ys]
    return sum(x * s for s in scales)


def item_to_module_free_tensor(x):
    m = x.abs().max().item()
    return torch.clamp(x, -m / 2, m / 2)


def _idx():
    return (randn(3), torch.randint(1, 6, (3,)))


def _k_divides():
    return (
        randn(12),
        torch.tensor(int(torch.tensor([1, 2, 3, 4, 6, 12])[torch.randint(0, 6, ())])),
    )


def _two():
    return (randn(3, 4), randn(2))


def _two_by_two():
    return (randn(3), randn(2, 2))


PROGRAMS = [
    Program(item_scale, lambda: (randn(3), randn(3))),
    Program(item_arithmetic, lambda: (randn(3, 4),)),
    Program(item_int_full, _idx),
    Program(item_int_is_size_zeros, lambda: (torch.randint(0, 4, (2,)),)),
    Program(item_view_with_check, _k_divides),
    Program(item_int_arange, lambda: (torch.randint(0, 9, ()),)),
    Program(item_returned, lambda: (randn(3),)),
    Program(item_int_returned, lambda: (torch.randint(0, 9, ()),)),
    Program(tolist_unpack, _two),
    Program(tolist_2d, _two_by_two),
    Program(tolist_int_sizes, lambda: (randn(3), torch.randint(0, 5, (2,)))),
    Program(item_bool, lambda: (randn(3),)),
    Program(item_in_comprehension, lambda: (randn(3), [randn(2), randn(4)])),
    Program(item_to_module_free_tensor, lambda: (randn(3, 4),)),
]


def _compile(fn, backend, on: bool):
    if PEER == "dynamo":  # the reference peer, never used by default
        import torch._dynamo

        torch._dynamo.reset()
        with torch._dynamo.config.patch(capture_scalar_outputs=on):
            compiled = torch.compile(fn, backend=backend, fullgraph=on)

        def call(*args):
            with torch._dynamo.config.patch(capture_scalar_outputs=on):
                return compiled(*args)

        return call
    from torchkiln_dynamo_capture import capture

    return capture(fn, backend, fullgraph=on, capture_scalar_outputs=on)


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    backend = RecordingBackend()
    compiled = _compile(program.fn, backend, True)
    torch.manual_seed(0)
    for tag in ("first call", "second call", "third call"):
        _one_run(program, compiled, program.make_inputs(), {}, rtol=None, atol=None, tag=tag)
        assert backend.calls == 1, (
            f"{tag}: {backend.calls} graphs, expected 1 (no recompile for new values)"
        )


def test_off_by_default_breaks_the_graph():
    from torchkiln_dynamo_capture import capture

    backend = RecordingBackend()
    compiled = capture(item_scale, backend)
    x, y = randn(3), randn(3)
    torch.testing.assert_close(compiled(x, y), item_scale(x, y))
    assert backend.calls == 2 and len(compiled.graph_breaks) == 1  # sum | y * s + s * 2


def test_off_by_default_a_tensor_in_a_size_breaks_under_symbolic_sizes():
    """With symbolic sizes the fakes have a ShapeEnv; without the option it must still refuse
    to read a tensor as a number (``new_zeros((rows, n))`` with ``n`` a 0-d tensor): an
    unbacked symbol there left the tensor among the op's int arguments, and the ATen trace of
    the graph failed (it then ran eagerly)."""
    from torchkiln_dynamo_capture import capture

    def f(x, n):
        z = x.new_zeros((x.shape[0], n + 0))
        z[:, : x.shape[1]] = x
        return z.relu()

    backend = RecordingBackend()
    compiled = capture(f, backend, dynamic=True)
    for rows in (3, 5, 4):
        x, n = randn(rows, 2), torch.tensor(rows + 1)
        torch.testing.assert_close(compiled(x, n), f(x, n))
    assert compiled.graph_breaks and "DataDependentOutputException" in str(compiled.graph_breaks[0])
    for gm in backend.graphs:
        for node in gm.graph.nodes:
            assert not any(isinstance(a, torch.fx.Node) for a in _flat_sizes(node))


def _flat_sizes(node):
    """The entries of a factory node's size argument (tensors there are what broke)."""
    if node.op == "call_method" and node.target == "new_zeros":
        return list(node.args[1])
    return []


def test_branch_on_item_breaks_with_a_reason():
    from torchkiln_dynamo_capture import Unsupported, capture

    def f(x):
        if x.sum().item() > 0:
            return x + 1
        return x - 1

    with pytest.raises(Unsupported, match="read from a tensor"):
        capture(f, RecordingBackend(), fullgraph=True, capture_scalar_outputs=True)(randn(3))
    compiled = capture(f, RecordingBackend(), capture_scalar_outputs=True)
    for sign in (1.0, -1.0):
        x = randn(3).abs() * sign
        torch.testing.assert_close(compiled(x), f(x))


def test_unbacked_values_are_graph_nodes():
    backend = RecordingBackend()
    _compile(item_int_full, backend, True)(*_idx())
    (gm,) = backend.graphs
    kinds = [(n.op, n.target) for n in gm.graph.nodes]
    assert ("call_method", "item") in kinds
    assert ("call_function", torch.ops.aten._assert_scalar.default) in kinds
    (item,) = [n for n in gm.graph.nodes if n.target == "item"]
    assert isinstance(item.meta["example_value"], torch.SymInt)
