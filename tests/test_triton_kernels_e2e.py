"""User-written Triton kernels launched inside a compiled function (``kernel[grid](...)``): one
graph, the launch a named extern call (``torchkiln.triton_kernel_launch``) with the tensors it
writes as functional results, the ops around it compiled; results equal eager's.

On a CPU-only machine the kernels run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1,
set before triton is imported); where CUDA is available and the interpreter is off, on the GPU."""

from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton")
import torchkiln  # noqa: E402
import triton.language as tl  # noqa: E402

DEVICE = (
    "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
)
pytestmark = pytest.mark.usefixtures("private_cache_dir")


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def scale_inplace_kernel(x_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = x_ptr + offs  # written through a name derived from the pointer
    tl.store(p, tl.load(p, mask=mask) * scale, mask=mask)


# the interpreter has no benchmarker: on the CPU the autotuner gets one config (it runs without timing)
_CONFIGS = [triton.Config({"BLOCK": 64})] + (
    [triton.Config({"BLOCK": 256})] if DEVICE == "cuda" else []
)


@triton.autotune(configs=_CONFIGS, key=["n"])
@triton.jit
def autotuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(
        out_ptr + offs,
        tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
        mask=mask,
    )


@triton.heuristics({"BLOCK": lambda args: 128 if args["n"] > 256 else 64})
@triton.jit
def heuristic_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(
        out_ptr + offs,
        tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
        mask=mask,
    )


def _rand(*size):
    return torch.randn(*size, device=DEVICE)


def _one_graph(compiled, launches=1):
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.graph_breaks, report
    assert not report.eager_fallbacks and all(not g.fallbacks for g in report.graphs), report
    calls = [c for g in report.graphs for c in g.extern_calls]
    assert calls.count("torchkiln.triton_kernel_launch") == launches, calls
    return report


def test_tuple_grid_with_ops_before_and_after():
    def f(x, y):
        a = x.sin() + 1
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 128),)](a, y, out, n, BLOCK=128)
        return out * 2 + y.cos()

    compiled = torchkiln.compile(f, options={"strict": True})
    x, y = _rand(1000), _rand(1000)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    report = _one_graph(compiled)
    assert report.num_kernels >= 2  # the ops before and after the launch are compiled kernels


def test_grid_lambda_of_meta():
    def f(x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
        add_kernel[grid](x, y, out, n, BLOCK=64)
        return out.relu()

    compiled = torchkiln.compile(f, options={"strict": True})
    x, y = _rand(300), _rand(300)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    _one_graph(compiled)


def test_kernel_writing_an_input_in_place():
    def f(x, s):
        y = x + 1
        scale_inplace_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), 3.0, BLOCK=128)
        return x * s + y

    compiled = torchkiln.compile(f, options={"strict": True})
    x, s = _rand(500), _rand(500)
    x_ref = x.clone()
    out = compiled(x, s)
    ref = f(x_ref, s)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x, x_ref)  # the input was written, as in eager
    _one_graph(compiled)


def test_two_launches_and_an_aliased_argument():
    def f(x, y):
        t = torch.empty_like(x)
        add_kernel[(4,)](x, y, t, x.numel(), BLOCK=64)
        add_kernel[(4,)](t, t, t, t.numel(), BLOCK=64)  # one buffer read and written
        return t - x

    compiled = torchkiln.compile(f, options={"strict": True})
    x, y = _rand(256), _rand(256)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    _one_graph(compiled, launches=2)


def test_autotuned_kernel():
    def f(x, y):
        out = torch.empty_like(x)
        n = x.numel()
        autotuned_add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        return out.exp()

    compiled = torchkiln.compile(f, options={"strict": True})
    x, y = _rand(700), _rand(700)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    _one_graph(compiled)


def test_heuristics_kernel_breaks_the_graph_and_runs_in_python():
    def f(x, y):
        out = torch.empty_like(x)
        n = x.numel()
        heuristic_add_kernel[(triton.cdiv(n, 64),)](x.cos(), y, out, n)
        return out + 1

    compiled = torchkiln.compile(f)
    x, y = _rand(300), _rand(300)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    report = torchkiln.report(compiled)
    assert len(report.graph_breaks) == 1 and "heuristic_add_kernel" in report.graph_breaks[0], (
        report
    )
    assert len(report.graphs) == 2 and not report.eager_fallbacks, report


def test_symbolic_length_one_graph_for_every_length():
    def f(x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=128)
        return out * x

    compiled = torchkiln.compile(f, dynamic=True, options={"strict": True})
    for n in (100, 300, 1000):
        x, y = _rand(n), _rand(n)
        torch.testing.assert_close(compiled(x, y), f(x, y))
    _one_graph(compiled)


_MAKERS = {
    "empty_like": lambda a: torch.empty_like(a),
    "empty": lambda a: torch.empty(a.shape, device=a.device),
    "new_empty": lambda a: a.new_empty(a.shape),
    "empty_strided": lambda a: torch.empty_strided(a.shape, a.stride(), device=a.device),
}


def _counting_copies(monkeypatch) -> list:
    """Counts ``Tensor.copy_`` calls made from Python (the launch operator copies so)."""
    calls: list = []
    real = torch.Tensor.copy_

    def copy_(self, *args, **kwargs):
        calls.append(tuple(self.shape))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    return calls


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("maker", list(_MAKERS))
def test_fresh_output_buffer_is_written_without_a_copy(monkeypatch, maker, dynamic):
    """An output made by ``torch.empty*`` in the graph and handed straight to the kernel holds
    nothing to keep: the launch writes a new buffer instead of a copy of it, so the compiled
    function copies no more tensors than eager (it copied the whole output before)."""
    make = _MAKERS[maker]

    def f(x, y):
        a = x.sin() + 1
        out = make(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 128),)](a, y, out, n, BLOCK=128)
        return out * 2 + y.cos()

    compiled = torchkiln.compile(f, dynamic=dynamic, options={"strict": True})
    for n in (300, 700):
        x, y = _rand(n), _rand(n)
        compiled(x, y)  # compiles outside the count
        copies = _counting_copies(monkeypatch)
        expected = f(x, y)
        eager_copies = len(copies)
        actual = compiled(x, y)
        monkeypatch.undo()
        torch.testing.assert_close(actual, expected)
        assert len(copies) - eager_copies == eager_copies, copies
    if dynamic:  # one graph for both lengths
        _one_graph(compiled)


def test_buffer_with_contents_is_still_copied(monkeypatch):
    """A buffer filled, or an input, before the launch keeps what the kernel does not write (the
    kernel writes the first half): those are copied, as before."""

    def f(x, y):
        filled = torch.empty_like(x)
        filled.fill_(5.0)
        half = x.numel() // 2
        add_kernel[(triton.cdiv(half, 64),)](x, y, filled, half, BLOCK=64)
        add_kernel[(triton.cdiv(half, 64),)](x, x, y, half, BLOCK=64)  # writes half of an input
        return filled * 2, y + 1

    compiled = torchkiln.compile(f, options={"strict": True})
    x, y = _rand(300), _rand(300)
    compiled(x, y.clone())  # compiles outside the count
    y_ref = y.clone()
    copies = _counting_copies(monkeypatch)
    actual = compiled(x, y)
    monkeypatch.undo()
    expected = f(x, y_ref)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(y, y_ref)
    # both launches copy what they write (and the graph writes y back into the input after)
    assert len(copies) >= 2, copies
    _one_graph(compiled, launches=2)


def test_written_parameters_from_the_source():
    from torchkiln_dynamo_capture.variables.triton_kernels import written_parameters

    # only tensors count (an int reaching a pointer's offset is never copied)
    assert written_parameters(add_kernel.fn) & {"x_ptr", "y_ptr", "out_ptr"} == {"out_ptr"}
    assert written_parameters(scale_inplace_kernel.fn) & {"x_ptr"} == {"x_ptr"}

    def other_kernel(ptr, n):
        pass

    def helper_call(
        a_ptr, b_ptr, n
    ):  # a callee the analysis does not know: what it receives counts
        tl.store(b_ptr, tl.load(a_ptr))
        other_kernel(a_ptr, n)

    assert written_parameters(helper_call) & {"a_ptr", "b_ptr"} == {"a_ptr", "b_ptr"}
