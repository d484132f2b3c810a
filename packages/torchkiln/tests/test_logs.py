"""TORCHKILN_LOGS from the compiler's side: output_code shows each compiled graph's generated code
(forward and backward), and a misspelt name stops torchkiln.compile with the valid names."""

import pytest
import torch
import torchkiln
from torchkiln_guards.logs import UnknownLogName

pytestmark = pytest.mark.usefixtures("restore_loggers")


def f(x, w):
    return torch.tanh(x @ w).sum(dim=-1) * 2.0


def test_output_code_prints_forward_and_backward_wrapper_and_kernels(monkeypatch, capsys):
    monkeypatch.setenv("TORCHKILN_LOGS", "output_code")
    compiled = torchkiln.compile(f, options={"strict": True})
    x, w = torch.randn(4, 8), torch.randn(8, 3, requires_grad=True)
    out = compiled(x, w)
    torch.testing.assert_close(out, f(x, w))
    (grad,) = torch.autograd.grad(out.sum(), w)
    (want,) = torch.autograd.grad(f(x, w).sum(), w)
    torch.testing.assert_close(grad, want)
    err = capsys.readouterr().err
    assert "[torchkiln.output_code] graph 0 forward: wrapper " in err
    assert "graph 0 backward: wrapper " in err
    assert "graph 0 forward: kernel 0: " in err and "graph 0 backward: kernel 0: " in err
    # the paths are real files holding the sources printed
    for line in err.splitlines():
        if ": wrapper " in line:
            path = line.split(": wrapper ", 1)[1]
            source = open(path).read()  # noqa: SIM115
            assert source.strip().splitlines()[0] in err


def test_nothing_is_printed_without_the_variable(monkeypatch, capsys):
    monkeypatch.delenv("TORCHKILN_LOGS", raising=False)
    compiled = torchkiln.compile(f, options={"strict": True})
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(compiled(x, w), f(x, w))
    assert "torchkiln.output_code" not in capsys.readouterr().err


def test_a_misspelt_name_is_an_error_at_compile(monkeypatch):
    monkeypatch.setenv("TORCHKILN_LOGS", "output_code,recompile")
    with pytest.raises(UnknownLogName, match="'recompile'.*valid names: .*recompiles"):
        torchkiln.compile(f)
    gm = torch.fx.symbolic_trace(f)
    with pytest.raises(UnknownLogName):
        torchkiln.backend(gm, [torch.randn(2, 8), torch.randn(8, 3)])
