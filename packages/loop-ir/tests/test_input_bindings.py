"""Where the wrapper reads size symbols (input sizes, strides, solved expressions) and tensor
constants of the ATen graph (``get_attr``), each against eager at several sizes."""

from __future__ import annotations

import pytest
import sympy
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx


def _compile(f, *inputs):
    gm = make_fx(f, decomposition_table=L.decompositions(), tracing_mode="symbolic")(*inputs)
    return gm, L.compile_graph(gm, list(inputs), L.ReferenceBackend())


def _check(cg, f, *inputs):
    for got, want in zip(cg(*inputs), f(*inputs)):
        torch.testing.assert_close(got, want)


def _strided(rows, cols):
    """A (rows, cols) view of a (rows, 2*cols) buffer: its row stride shows in no size."""
    return torch.randn(rows, 2 * cols)[:, ::2]


@pytest.mark.parametrize(
    "make",
    [
        lambda r, c: torch.randn(c, r).t(),  # transposed: a stride equal to a size
        _strided,  # stride 2*c: only the stride shows it
        lambda r, c: torch.randn(2 * r, c)[::2],  # row stride 2*c, column stride 1
        lambda r, c: torch.randn(r, c + 3)[:, 1 : c + 1],  # a padded row: stride c + 3
    ],
)
def test_symbol_only_in_a_stride_is_read_from_the_input(make):
    """`NameError: name 's37' is not defined` was the commonest eager fallback of the fuzzer: a
    symbol the input's layout shows only in a stride was never bound by the wrapper."""

    def f(x):
        return x.t().cos().sum(0), x * 2

    gm, cg = _compile(f, make(5, 4))
    stride_syms = {
        s
        for n in gm.graph.nodes
        if n.op == "placeholder"
        for st in n.meta["val"].stride()
        if isinstance(st, torch.SymInt)
        for s in sympy.sympify(st.node.expr).free_symbols
    }
    assert stride_syms <= set(cg.scheduled.size_symbols)
    for r, c in [(5, 4), (7, 3), (2, 9)]:
        _check(cg, f, make(r, c))


def test_solved_stride_symbol_binding():
    """A symbol shown only as ``2*s`` is solved for from the value read (s = _v / 2)."""
    x = torch.randn(6, 3)
    gm = make_fx(lambda x: (x + 1,), tracing_mode="symbolic")(x)
    s, rows = (
        sympy.Symbol("s99", integer=True, positive=True),
        sympy.Symbol("s98", integer=True, positive=True),
    )
    lowering = L.graph.GraphLowering(gm, [x], L.LoopIROptions())
    lowering._symbol_sites = [(0, "size", 0, rows), (0, "stride", 0, 2 * s)]
    lowering._bind_symbols()
    src = lowering.size_symbols[s]
    assert (src.attr, src.dim) == ("stride", 0) and src.solve == sympy.Symbol(
        "_v", integer=True
    ) / 2


def test_unbound_symbol_is_refused_at_compile_time():
    """A symbol no input shows must fail while compiling (a clean fallback), not on a call."""
    x = torch.randn(4, 3)
    gm, cg = _compile(lambda x: (x * 2,), x)
    sym = next(iter(cg.scheduled.size_symbols))
    from dataclasses import replace

    from torchkiln_loop_ir.wrapper import wrapper_source

    with pytest.raises(L.LoweringError, match="size symbol"):
        wrapper_source(
            replace(
                cg.scheduled,
                size_symbols={k: v for k, v in cg.scheduled.size_symbols.items() if k != sym},
            )
        )


def test_tensor_constant_becomes_an_input():
    """``torch.tensor([...])`` in a traced function is a get_attr constant; it was rejected by
    lowering (the whole graph ran eagerly, HF generation with use_cache=True among others)."""

    def f(x):
        w = torch.tensor([1.5, -2.0, 0.25])
        return (x * w + torch.tensor(3.0)).sum(0), w * w - x

    x = torch.randn(4, 3)
    for mode in ("real", "symbolic"):
        gm = make_fx(f, decomposition_table=L.decompositions(), tracing_mode=mode)(x)
        assert any(n.op == "get_attr" for n in gm.graph.nodes)
        code = gm.code
        cg = L.compile_graph(gm, [x], L.ReferenceBackend())
        assert gm.code == code  # the caller's graph is left as it was
        assert not cg.fallbacks and len(cg.constants) >= 1
        _check(cg, f, x)
        _check(cg, f, torch.randn(4, 3))
    _check(cg, f, torch.randn(9, 3))  # symbolic rows


def test_graph_with_only_a_constant():
    def f():
        return (torch.tensor([[1, 2], [3, 4]]) * 2,)

    gm = make_fx(f)()
    cg = L.compile_graph(gm, [], L.ReferenceBackend())
    torch.testing.assert_close(cg()[0], f()[0])
