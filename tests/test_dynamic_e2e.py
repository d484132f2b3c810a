"""Dynamic shapes end to end: capture with symbolic sizes -> aot-partition -> loop-ir -> C++ and
Triton (interpreter), one compiled graph serving many sizes, against eager on fresh inputs."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")

import torchkiln


def _block(x, w):
    b, t, c = x.shape
    h = torch.softmax(x @ w, -1)
    return F.layer_norm(h.view(b, t, 2, c // 2).sum(2), (c // 2,)).relu()


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_one_graph_many_sizes(codegen):
    compiled = torchkiln.compile(_block, dynamic=True, options={"codegen": codegen, "strict": True})
    w = torch.randn(16, 16)
    for b, t in [(2, 5), (3, 9), (4, 33), (2, 17)]:
        x = torch.randn(b, t, 16)
        torch.testing.assert_close(compiled(x, w), _block(x, w), atol=1e-4, rtol=1e-4)
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.eager_fallbacks
    assert all(not g.fallbacks for g in report.graphs)  # size arithmetic is not an ATen fallback


def test_automatic_dynamic_recompiles_once():
    compiled = torchkiln.compile(_block, options={"strict": True})  # dynamic=None
    w = torch.randn(16, 16)
    for b in (2, 3, 4, 5, 6):
        x = torch.randn(b, 7, 16)
        torch.testing.assert_close(compiled(x, w), _block(x, w), atol=1e-4, rtol=1e-4)
    assert torchkiln.report(compiled).num_graphs == 2


def test_llama_with_dynamic_sequence_length():
    """A real model: the attention kernel's result has a layout of its own, which the kernels after
    it must see at every size (it was silently wrong before the symbolic stride check)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      intermediate_size=128, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    compiled = torchkiln.compile(model, dynamic=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, t in [(2, 16), (2, 24), (3, 11)]:
            ids = torch.randint(0, 256, (b, t))
            got = compiled(ids, use_cache=False).logits
            want = model(ids, use_cache=False).logits
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
