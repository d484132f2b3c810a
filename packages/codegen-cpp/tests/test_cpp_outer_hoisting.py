"""Values of a pointwise kernel that do not change along its innermost x-loop (a batch norm's
per-channel scale) are computed once per run of that loop, outside it: the source says where,
the results are eager's. What must stay inside does: a load of a buffer the kernel writes, a
value of the innermost variable, an integer division where the innermost loop may run zero
times."""

from __future__ import annotations

import pytest
import sympy
import torch
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.ops import ops


def _innermost_loop(source: str) -> tuple[str, str]:
    """(the text before the innermost ``for``, the text from it on)."""
    cut = source.rindex("for (int64_t")
    return source[:cut], source[cut:]


def _batch_norm_apply(kit, n, c, hw, symbolic_hw=False):
    """out = relu((x - mean[c]) * rsqrt(var[c] + eps) * w[c] + b[c]) over (n, c, hw)."""
    hw_size = index_symbol("s", 0) if symbolic_hw else hw

    def body(x, r):
        chan = x[1]
        var = ops.load("var", chan)
        scale = ops.mul(
            ops.rsqrt(ops.add(var, ops.constant(1e-5, torch.float32))), ops.load("w", chan)
        )
        v = ops.load("x", x[0] * c * hw_size + x[1] * hw_size + x[2])
        centred = ops.sub(v, ops.load("mean", chan))
        ops.store(
            "out",
            x[0] * c * hw_size + x[1] * hw_size + x[2],
            ops.relu(ops.add(ops.mul(centred, scale), ops.load("b", chan))),
        )

    return kit.spec(
        "bn_apply",
        (n, c, hw_size),
        (),
        [("loop", [("out", body, False)])],
        [
            kit.buf("x", (n, c, hw_size)),
            *(kit.buf(name, (c,)) for name in ("mean", "var", "w", "b")),
            kit.buf("out", (n, c, hw_size)),
        ],
        ("x", "mean", "var", "w", "b"),
        ("out",),
        size_args=(hw_size,) if symbolic_hw else (),
    )


def _bn_reference(x, mean, var, w, b):
    scale = torch.rsqrt(var + 1e-5) * w
    return torch.relu((x - mean[:, None]) * scale[:, None] + b[:, None])


@pytest.mark.parametrize("n, c, hw", [(1, 1, 1), (3, 5, 7), (8, 64, 196)])
def test_a_per_channel_scale_is_computed_outside_the_innermost_loop(kit, n, c, hw):
    k = kit.compile_one(_batch_norm_apply(kit, n, c, hw))
    outer, inner = _innermost_loop(k.source)
    assert "std::sqrt" in outer and "std::sqrt" not in inner
    assert inner.count("in_ptr") == 1  # only x is read per element
    x = torch.randn(n, c, hw)
    mean, var, w, b = torch.randn(c), torch.rand(c) + 0.1, torch.randn(c), torch.randn(c)
    out = torch.empty(n, c, hw)
    k(x, mean, var, w, b, out)
    torch.testing.assert_close(out, _bn_reference(x, mean, var, w, b))


def test_a_symbolic_innermost_size_of_zero_or_more(kit):
    k = kit.compile_one(_batch_norm_apply(kit, 4, 6, None, symbolic_hw=True))
    outer, _ = _innermost_loop(k.source)
    assert "std::sqrt" in outer
    for hw in (0, 1, 9, 300):
        x = torch.randn(4, 6, hw)
        mean, var, w, b = torch.randn(6), torch.rand(6) + 0.1, torch.randn(6), torch.randn(6)
        out = torch.empty(4, 6, hw)
        k(x, mean, var, w, b, out, hw)
        torch.testing.assert_close(out, _bn_reference(x, mean, var, w, b))


def test_a_buffer_the_kernel_writes_is_read_per_element(kit):
    """acc[:, 1:] += acc[:, :1] in place: the broadcast read of the buffer the kernel writes
    stays in the loop, as the rule for written buffers says, though this one's column 0 is
    never written."""
    m, n = 5, 9

    def body(x, r):
        first = ops.load("acc", x[0] * n)
        at = x[0] * n + 1 + x[1]
        ops.store("acc", at, ops.add(ops.load("acc", at), first))

    k = kit.compile_one(
        kit.spec(
            "in_place",
            (m, n - 1),
            (),
            [("loop", [("acc", body, False)])],
            [kit.buf("acc", (m, n))],
            ("acc",),
            ("acc",),
        )
    )
    outer, inner = _innermost_loop(k.source)
    assert "_ptr0[" not in outer and inner.count("_ptr0[") == 3
    acc = torch.randn(m, n)
    expected = acc.clone()
    expected[:, 1:] += acc[:, :1]
    k(acc)
    torch.testing.assert_close(acc, expected)


def test_an_integer_division_moves_out_only_where_the_loop_runs(kit):
    """q[i, j] = a[i, j] + 100 // d[i]: the division by d[i] is outside the loop over j of 7,
    inside it over j of a symbolic size (zero columns must not raise for a zero divisor)."""
    s0 = index_symbol("s", 0)

    def spec_of(n, name):
        def body(x, r):
            q = ops.floordiv(ops.constant(100, torch.int64), ops.load("d", x[0]))
            ops.store("out", x[0] * n + x[1], ops.add(ops.load("a", x[0] * n + x[1]), q))

        return kit.spec(
            name,
            (4, n),
            (),
            [("loop", [("out", body, False)])],
            [
                kit.buf("a", (4, n), torch.int64),
                kit.buf("d", (4,), torch.int64),
                kit.buf("out", (4, n), torch.int64),
            ],
            ("a", "d"),
            ("out",),
            size_args=(n,) if isinstance(n, sympy.Symbol) else (),
        )

    fixed = kit.compile_one(spec_of(7, "div_fixed"))
    assert "tk_" in _innermost_loop(fixed.source)[0].split("{", 1)[1]  # the division, outside
    a, d = torch.randint(-50, 50, (4, 7)), torch.tensor([3, -7, 1, 12])
    out = torch.empty(4, 7, dtype=torch.int64)
    fixed(a, d, out)
    torch.testing.assert_close(out, a + torch.div(100, d, rounding_mode="floor")[:, None])

    symbolic = kit.compile_one(spec_of(s0, "div_symbolic"))
    outer, inner = _innermost_loop(symbolic.source)
    assert "tk_" not in outer.split("{", 1)[1] and "tk_" in inner
    empty = torch.empty(4, 0, dtype=torch.int64)
    symbolic(empty, torch.tensor([0, 0, 0, 0]), torch.empty(4, 0, dtype=torch.int64), 0)
    a = torch.randint(-50, 50, (4, 5))
    out = torch.empty(4, 5, dtype=torch.int64)
    symbolic(a, d, out, 5)
    torch.testing.assert_close(out, a + torch.div(100, d, rounding_mode="floor")[:, None])
