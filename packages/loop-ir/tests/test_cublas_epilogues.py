"""cuBLASLt epilogues (cublas_epilogues.py): a product followed by ReLU or the tanh GELU becomes
one ``_addmm_activation`` call, equal to eager on fresh random inputs; the activation is
recognised by its values whatever ops spell it; a product whose value something else reads, an
unaligned one, or a GELU where ATen's call applies the exact form (the CPU) is left as it is,
with its reason in the log; "measure" takes the fused call only where it timed faster. The pass
is for CUDA; ``cublas_epilogues="always"`` runs it here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln_loop_ir as L
from torchkiln_loop_ir import cublas_epilogues as ce

ALWAYS = L.LoopIROptions(cublas_epilogues="always", mkldnn_linear="never", group_linears=False)
NEVER = L.LoopIROptions(cublas_epilogues="never", mkldnn_linear="never", group_linears=False)
FUSED = "aten._addmm_activation"


def _gelu_new(v):
    """GPT-2's ``gelu_new``, written out as transformers writes it."""
    return 0.5 * v * (1.0 + torch.tanh(0.7978845608028654 * (v + 0.044715 * torch.pow(v, 3.0))))


def _linear(x, w, b):
    return F.linear(x, w, b)  # addmm(b, x.view(-1, k), w.t()).view(...), or mm without b


@pytest.mark.parametrize("bias", [True, False], ids=["addmm", "mm"])
def test_relu_after_a_linear_runs_in_the_epilogue(check, bias):
    def f(x, w, b, w2):
        return F.linear(torch.relu(_linear(x, w, b if bias else None)), w2)

    for _ in range(2):  # fresh inputs: the compiled graph is new each time
        x, w, b, w2 = (
            torch.randn(4, 8, 32),
            torch.randn(64, 32),
            torch.randn(64),
            torch.randn(16, 64),
        )
        cg = check(f, x, w, b, w2, atol=1e-4, rtol=1e-4, options=ALWAYS)
        assert cg.extern_calls.count(FUSED) == 1, cg.extern_calls
        assert [ln for ln in cg.linear_log if "epilogue" in ln], cg.linear_log
        assert not cg.kernels or all("relu" not in k.source for k in cg.kernels)


def test_never_leaves_the_product(check):
    x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)
    cg = check(lambda x, w, b: torch.relu(_linear(x, w, b)), x, w, b, atol=1e-4, options=NEVER)
    assert FUSED not in cg.extern_calls and "aten.addmm" in cg.extern_calls


def _product_value(gm):
    """The addmm/mm node's value as the model sees it: the product, or its view."""
    p = next(n for n in gm.graph.nodes if n.target in (ce.aten.addmm.default, ce.aten.mm.default))
    users = list(p.users)
    return users[0] if len(users) == 1 and users[0].target is ce.aten.view.default else p


@pytest.mark.parametrize(
    "act,expected",
    [
        (torch.relu, "relu"),
        (lambda v: torch.clamp_min(v, 0.0), "relu"),
        (lambda v: F.gelu(v, approximate="tanh"), "gelu_tanh"),  # v * v * v decomposed
        (_gelu_new, "gelu_tanh"),  # pow(v, 3.0)
        (lambda v: torch.relu(v) * 2, "relu"),  # the relu alone; the scale stays a kernel
    ],
    ids=["relu", "clamp_min", "gelu_tanh", "gelu_new", "relu_then_scale"],
)
def test_activation_is_recognised_by_its_values(trace, act, expected):
    x, w, b = torch.randn(2, 8, 32), torch.randn(64, 32), torch.randn(64)
    gm = trace(lambda x, w, b: act(_linear(x, w, b)), x, w, b)
    found = ce.activation(_product_value(gm))
    assert not isinstance(found, str), found
    assert found[0] == expected


@pytest.mark.parametrize(
    "act",
    [
        F.gelu,  # the exact (erf) GELU: no cuBLASLt epilogue computes it
        F.silu,
        lambda v: torch.relu(v) + v,  # the product is read beside its activation
        lambda v: torch.tanh(v) * 3,
    ],
    ids=["gelu_erf", "silu", "read_twice", "tanh"],
)
def test_other_consumers_are_not_an_activation(trace, act):
    x, w, b = torch.randn(2, 8, 32), torch.randn(64, 32), torch.randn(64)
    gm = trace(lambda x, w, b: act(_linear(x, w, b)), x, w, b)
    assert isinstance(ce.activation(_product_value(gm)), str)


def test_product_read_elsewhere_is_kept(check):
    """A training forward keeps GELU's input for its backward: the product has a reader beside
    the activation, so it stays a product."""
    x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)

    def f(x, w, b):
        y = _linear(x, w, b)
        return torch.relu(y), y

    cg = check(f, x, w, b, atol=1e-4, rtol=1e-4, options=ALWAYS)
    assert FUSED not in cg.extern_calls


def test_activation_read_twice_still_fuses(check):
    """ReLU's backward keeps the activation's result: the fused call still makes it."""
    x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)

    def f(x, w, b):
        r = torch.relu(_linear(x, w, b))
        return r * 2, r.sum(0)

    cg = check(f, x, w, b, atol=1e-4, rtol=1e-4, options=ALWAYS)
    assert FUSED in cg.extern_calls


def test_gelu_is_kept_where_aten_applies_the_exact_form(check):
    """ATen's CPU ``_addmm_activation`` applies the exact GELU: a tanh GELU stays as it was."""
    assert not ce.gelu_is_tanh(torch.device("cpu"), torch.float32)
    x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)
    cg = check(lambda x, w, b: _gelu_new(_linear(x, w, b)), x, w, b, options=ALWAYS)
    assert FUSED not in cg.extern_calls
    assert any("exact GELU" in ln for ln in cg.linear_log), cg.linear_log


def test_unaligned_products_are_left_to_pad_mm(check):
    x, w = torch.randn(16, 30), torch.randn(64, 30)  # K of 30 float32 values: 120 bytes
    cg = check(lambda x, w: torch.relu(x @ w.t()), x, w, atol=1e-4, rtol=1e-4, options=ALWAYS)
    assert FUSED not in cg.extern_calls
    assert any("unaligned" in ln for ln in cg.linear_log), cg.linear_log


@pytest.mark.parametrize("faster", [True, False])
def test_measure_takes_the_fused_call_only_where_it_timed_faster(trace, monkeypatch, faster):
    monkeypatch.setattr(ce, "MIN_FLOPS", 0)
    monkeypatch.setattr(ce, "_DECISIONS", {})
    monkeypatch.setattr(ce, "_measure", lambda *a: (faster, 20e-6, 15e-6 if faster else 21e-6))
    x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)
    gm = trace(lambda x, w, b: torch.relu(_linear(x, w, b)), x, w, b)
    new, log = ce.use_cublas_epilogues(gm, "measure")
    targets = [n.target for n in new.graph.nodes]
    assert (ce.ADDMM_ACTIVATION in targets) is faster, log
    assert "unfused 20.0 us" in log[0], log
    if faster:
        x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)
        torch.testing.assert_close(new(x, w, b), torch.relu(_linear(x, w, b)))


def test_measure_leaves_small_products_untimed(trace, monkeypatch):
    def refuse(*a):
        raise AssertionError("a small product was timed")

    monkeypatch.setattr(ce, "_measure", refuse)
    x, w, b = torch.randn(16, 32), torch.randn(64, 32), torch.randn(64)
    gm = trace(lambda x, w, b: torch.relu(_linear(x, w, b)), x, w, b)
    new, log = ce.use_cublas_epilogues(gm, "measure")
    assert new is gm and "MFLOP" in log[0], log


def test_unknown_mode_is_a_value_error():
    with pytest.raises(ValueError, match="cublas_epilogues"):
        L.LoopIROptions(cublas_epilogues="sometimes")
