"""Matmul templates end to end (loop-ir's matmul_templates.py, codegen-triton's _template.py): a
product computed inside the kernel of its pointwise consumers, through ``torchkiln.compile`` on
Triton (the interpreter on the CPU, templates forced on with ``matmul_templates="always"``),
against eager on fresh random inputs; on CUDA, in the default mode, a bfloat16 BERT-size layer
against a float64 reference."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import torchkiln
from codegens import TRITON
from training import assert_steps_match

ALWAYS = {"codegen": "triton", "strict": True, "loop_ir": {"matmul_templates": "always"}}
pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _linears(compiled) -> list[str]:
    return [ln for g in torchkiln.report(compiled).graphs for ln in g.linears]


def _fused(compiled) -> list[str]:
    return [ln for ln in _linears(compiled) if "with its epilogue" in ln]


def _check(fn, *shapes, fused: int, options=ALWAYS):
    compiled = torchkiln.compile(fn, options=options)
    for _ in range(2):
        args = [torch.randn(s) for s in shapes]
        torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-4)
    assert len(_fused(compiled)) == fused, _linears(compiled)
    return compiled


@pytest.mark.parametrize("codegen", [TRITON])
def test_linear_exact_gelu(codegen):
    """BERT's intermediate dense: addmm, then the exact GELU (no cuBLASLt epilogue)."""
    w, b = torch.randn(48, 64), torch.randn(64)
    _check(lambda x: F.gelu(F.linear(x, w.t(), b)), (2, 16, 48), fused=1)


@pytest.mark.parametrize("codegen", [TRITON])
def test_unaligned_sizes_wrap_and_mask(codegen):
    """M, N and K that no block divides: the last tiles wrap and are masked."""
    w, b = torch.randn(50, 29), torch.randn(50)
    _check(lambda x: torch.tanh(F.linear(x, w, b)) * 2, (37, 29), fused=1)


@pytest.mark.parametrize("codegen", [TRITON])
def test_mm_silu_times_another_product(codegen):
    """Llama's MLP: silu(x @ gate) * (x @ up): one product in the kernel, the other read."""
    gate, up = torch.randn(32, 40), torch.randn(32, 40)
    _check(lambda x: F.silu(x @ gate) * (x @ up), (24, 32), fused=1)


@pytest.mark.parametrize("codegen", [TRITON])
def test_residual_add_and_strided_operands(codegen):
    """A transposed left operand, a 2-D bias broadcast along rows, a residual of other strides."""
    _check(
        lambda a, w, bias, res: torch.addmm(bias, a.t(), w) + res.t(),
        (24, 40),
        (24, 32),
        (1, 32),
        (32, 40),
        fused=1,
    )


@pytest.mark.parametrize("codegen", [TRITON])
def test_products_kept(codegen):
    """A product two kernels read, one the graph returns, one read at other elements: each
    stays an extern, with its reason in the log."""
    w = torch.randn(16, 16)

    def fn(x):
        p1 = x @ w
        a = p1.relu().sum(0)  # a reduction reads it
        p2 = x @ w.t()
        p3 = (x + 1) @ w
        return a, p2, p2.exp(), p3.t().contiguous() * 2

    compiled = _check(fn, (16, 16), fused=0)
    log = " ".join(_linears(compiled))
    assert "graph output" in log and "other elements" in log, log


@pytest.mark.parametrize("codegen", [TRITON])
def test_bert_layer_inference(codegen):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    compiled = torchkiln.compile(model, options=ALWAYS)
    with torch.no_grad():
        for _ in range(2):
            ids = torch.randint(0, 128, (2, 16))
            got = compiled(input_ids=ids).last_hidden_state
            torch.testing.assert_close(got, model(input_ids=ids).last_hidden_state)
    assert len(_fused(compiled)) >= 2, _linears(compiled)  # each layer's intermediate GELU


@pytest.mark.parametrize("codegen", [TRITON])
def test_training_step(codegen):
    """A training step: the forward keeps GELU's input for the backward (kept as an extern);
    the gradients against eager's."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 8))
    ours = copy.deepcopy(eager)
    compiled = torchkiln.compile(ours, options=ALWAYS)
    assert_steps_match(compiled, ours, eager, lambda: (torch.randn(20, 32),))
    assert any("graph output" in ln for ln in _linears(compiled)), _linears(compiled)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="templates are timed on a GPU")
def test_cuda_bert_intermediate_in_the_default_mode():
    """BERT-base's intermediate dense and exact GELU at 16 x 512 tokens in bfloat16, the
    default mode timing the template: as near a float64 reference as eager."""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layer = torch.nn.Linear(768, 3072).to(dev)
    x = torch.randn(8192, 768, device=dev)
    with torch.no_grad():
        ref = F.gelu(layer.double()(x.double()))
        layer = layer.bfloat16()
        x = x.bfloat16()
        compiled = torchkiln.compile(lambda v: F.gelu(layer(v)), options={"strict": True})
        got = compiled(x)
        eager = F.gelu(layer(x))
    scale = ref.abs().max()
    err = (got.double() - ref).abs().max() / scale
    err_eager = (eager.double() - ref).abs().max() / scale
    assert err <= 1.5 * err_eager + 1e-3, (err, err_eager, _linears(compiled))


@pytest.mark.parametrize("codegen", [TRITON])
def test_auto_mode_takes_the_code_generators_choice(codegen, monkeypatch):
    """The default mode asks the code generator (its choice, here replaced): a tile it names is
    the kernel's, a None keeps the extern; both with its reason in the log."""
    from torchkiln_codegen_triton.backend import TritonBackend

    tile = (("block_m", 16), ("block_n", 16), ("block_k", 16), ("group_m", 2))
    tile += (("num_warps", 1), ("num_stages", 1))
    answers = iter([(tile, "fake timing: the template"), (None, "fake timing: the extern")])
    monkeypatch.setattr(
        TritonBackend,
        "choose_matmul_template",
        lambda self, requests, buffers: [next(answers) for _ in requests],
        raising=True,
    )
    w1, w2 = torch.randn(24, 40), torch.randn(40, 24)
    options = {"codegen": "triton", "strict": True}
    compiled = _check(lambda x: F.gelu(F.gelu(x @ w1) @ w2), (33, 24), fused=1, options=options)
    log = " ".join(_linears(compiled))
    assert "fake timing: the template" in log and "fake timing: the extern" in log, log
    sources = [open(p).read() for k, p in torchkiln.report(compiled).graphs[0].artifacts.items()]
    assert any("tile 16x16x16" in s for s in sources)


@pytest.mark.parametrize("codegen", [TRITON])
def test_one_buffer_as_both_operands(codegen):
    """``t @ t``: the kernel takes the buffer once (fuzz seed 901858 launched it with one
    argument too many)."""
    _check(lambda x: torch.exp(x @ x) - x, (24, 24), fused=1)
    _check(lambda x: (x + 1) @ (x + 1) * 2, (1, 1), fused=1)
