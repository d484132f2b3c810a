"""cuBLASLt epilogues end to end (loop-ir's cublas_epilogues.py): T5's feed-forward block (``wi``
without a bias, ReLU) and GPT-2's (``Conv1D`` with a bias, ``gelu_new``) through
``torchkiln.compile``, the pass forced on (``cublas_epilogues="always"``) on the CPU's code
generators, inference and a training step against eager on fresh random inputs; on CUDA, in
the default mode, a bfloat16 MLP against a float64 reference."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from codegens import CODEGENS
from training import assert_steps_match

transformers = pytest.importorskip("transformers")

LOOP_IR = {"cublas_epilogues": "always", "mkldnn_linear": "never", "group_linears": False}


def _t5():
    cfg = transformers.T5Config(
        num_layers=2, d_model=64, d_ff=128, num_heads=2, d_kv=32, vocab_size=128, dropout_rate=0.0
    )
    return transformers.T5EncoderModel(cfg)


def _linears(compiled) -> list[str]:
    return [ln for g in torchkiln.report(compiled).graphs for ln in g.linears]


def _epilogue_lines(compiled) -> list[str]:
    return [ln for ln in _linears(compiled) if "_addmm_activation" in ln]


@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("codegen", CODEGENS)
def test_t5_feed_forward_relu_in_the_epilogue(codegen):
    torch.manual_seed(0)
    model = _t5().eval()
    compiled = torchkiln.compile(model, options={"codegen": codegen, "loop_ir": LOOP_IR})
    with torch.no_grad():
        for _ in range(2):
            ids = torch.randint(0, 128, (2, 16))
            got = compiled(input_ids=ids).last_hidden_state
            torch.testing.assert_close(got, model(input_ids=ids).last_hidden_state)
    assert len(_epilogue_lines(compiled)) == 2, _linears(compiled)


@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("codegen", CODEGENS)
def test_t5_training_step_keeps_relu_for_its_backward(codegen):
    """The forward saves ReLU's result for its backward: the fused call makes it."""
    torch.manual_seed(0)
    eager = _t5().train()
    ours = copy.deepcopy(eager)
    compiled = torchkiln.compile(ours, options={"codegen": codegen, "loop_ir": LOOP_IR})
    assert_steps_match(
        compiled,
        ours,
        eager,
        lambda: {"input_ids": torch.randint(0, 128, (2, 16))},
        output=lambda r: r.last_hidden_state,
    )
    assert _epilogue_lines(compiled), _linears(compiled)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuBLASLt's epilogues need CUDA")
@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_cuda_mlp_in_the_default_mode(act):
    """GPT-2's MLP (a Conv1D's addmm and gelu_new) and T5's (mm and ReLU) at a size the
    default mode times: as near a float64 reference as eager in bfloat16."""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    w1 = (torch.randn(768, 3072, device=dev) / 28).bfloat16()
    b1 = torch.randn(3072, device=dev).bfloat16() if act == "gelu_new" else None
    w2 = (torch.randn(3072, 768, device=dev) / 55).bfloat16()

    def mlp(x, w1, b1, w2):
        h = torch.addmm(b1, x.view(-1, 768), w1) if b1 is not None else x.view(-1, 768) @ w1
        h = h.view(*x.shape[:-1], 3072)
        if act == "gelu_new":
            h = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h.pow(3.0))))
        else:
            h = torch.relu(h)
        return h @ w2

    compiled = torchkiln.compile(mlp)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(8, 512, 768, device=dev).bfloat16()
            got = compiled(x, w1, b1, w2)
            exact = mlp(x.double(), w1.double(), None if b1 is None else b1.double(), w2.double())
            eager = mlp(x, w1, b1, w2)
            ours_err = (got.double() - exact).abs().max().item()
            eager_err = (eager.double() - exact).abs().max().item()
            assert ours_err <= 1.5 * eager_err + 1e-3, (ours_err, eager_err)
    print(_linears(compiled))
