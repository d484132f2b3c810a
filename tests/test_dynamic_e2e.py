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
from tiny_transformers import tiny_model


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
    model = tiny_model(
        "LlamaForCausalLM",
        vocab=256,
        hidden=64,
        layers=1,
        heads=4,
        ffn=128,
        positions=64,
        kv_heads=4,
    ).eval()
    compiled = torchkiln.compile(model, dynamic=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, t in [(2, 16), (2, 24), (3, 11)]:
            ids = torch.randint(0, 256, (b, t))
            got = compiled(ids, use_cache=False).logits
            want = model(ids, use_cache=False).logits
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


#: one layer, hidden 32, random weights (seed 0)
HF_SMALL = {
    "bert": lambda: tiny_model("BertModel", vocab=100, hidden=32, layers=1, heads=2, ffn=64),
    "gpt2": lambda: tiny_model(
        "GPT2LMHeadModel", vocab=100, hidden=32, layers=1, heads=2, positions=64
    ),
    "distilbert": lambda: tiny_model(
        "DistilBertModel", vocab=100, hidden=32, layers=1, heads=2, ffn=64
    ),
}


@pytest.mark.parametrize(
    "name,train", [("bert", False), ("gpt2", False), ("distilbert", False), ("bert", True)]
)
def test_transformers_stay_symbolic_in_sequence_length(name, train):
    """One graph serves every sequence length (linear, tuple arithmetic on sizes and the
    partitioner's cost model used to read symbolic sizes as ints and specialize them)."""
    model = HF_SMALL[name]().train(train)
    model.config.use_cache = False
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    compiled = torchkiln.compile(model, dynamic=True, options={"strict": True})
    for length in (8, 12, 17):
        ids = torch.randint(0, 100, (2, length))
        with torch.set_grad_enabled(train):
            out, ref = compiled(ids)[0], model(ids)[0]
        torch.testing.assert_close(out, ref)
        if train:
            grads = torch.autograd.grad(
                out.square().mean(), list(model.parameters()), allow_unused=True
            )
            expected = torch.autograd.grad(
                ref.square().mean(), list(model.parameters()), allow_unused=True
            )
            for g, e in zip(grads, expected):
                if e is not None:
                    torch.testing.assert_close(g, e)
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.graph_breaks


#: issue 15's configs: 2 layers, hidden 64, random weights (seed 0)
HF_ISSUE15 = {
    "bert": lambda: tiny_model(
        "BertModel", vocab=64, hidden=64, layers=2, heads=2, ffn=128, positions=64
    ),
    "gpt2": lambda: tiny_model(
        "GPT2Model", vocab=64, hidden=64, layers=2, heads=2, positions=64, use_cache=False
    ),
    "distilbert": lambda: tiny_model(
        "DistilBertModel", vocab=64, hidden=64, layers=2, heads=2, ffn=128, positions=64
    ),
}


@pytest.mark.parametrize(
    "name,embeds", [("bert", False), ("gpt2", False), ("distilbert", False), ("bert", True)]
)
def test_padded_batches_at_many_lengths_are_one_graph(name, embeds):
    """Issue 15: with ``dynamic=True`` and a padding mask, lengths 8, 12, 16 and 24 are served by
    the graph of the first call (TorchDynamo gives one graph here too). With ``inputs_embeds``
    the hidden dim is symbolic as well, which once made a ShapeGuard fail on its own sizes."""
    model = HF_ISSUE15[name]().eval()
    compiled = torchkiln.compile(model, dynamic=True, options={"strict": True})
    for length in (8, 12, 16, 24):
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length // 2 :] = 0  # the second row is padded
        inputs = (
            {"inputs_embeds": torch.randn(2, length, 64)}
            if embeds
            else {"input_ids": torch.randint(1, 64, (2, length))}
        )
        with torch.no_grad():
            out = compiled(**inputs, attention_mask=mask).last_hidden_state
            ref = model(**inputs, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        report = torchkiln.report(compiled)
        assert report.num_graphs == 1, f"length {length}: {report.num_graphs} graphs"
        assert not report.graph_breaks and not report.eager_fallbacks


def _clamped(x):
    n = min(x.size(1), 16)  # transformers' truncation to max positions
    m = max(x.size(1) - 4, 2, x.size(0))
    return x[:, :n] * 2 + torch.arange(n).view(1, -1, 1), torch.ones(m).sum()


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_min_max_of_a_size_stay_symbolic(codegen):
    """``min(seq_len, 16)`` is a torch.sym_min node, not a guard on the length; the wrapper
    allocates buffers of size ``Min(16, s1)``. Past 16 the slice's layout decision differs, which
    may cost one more graph (never one per length)."""
    compiled = torchkiln.compile(
        _clamped, dynamic=True, options={"codegen": codegen, "strict": True}
    )
    for length in (8, 11, 13, 15):
        x = torch.randn(2, length, 10)
        for got, want in zip(compiled(x), _clamped(x)):
            torch.testing.assert_close(got, want)
    assert torchkiln.report(compiled).num_graphs == 1
    for length in (24, 40, 17):
        x = torch.randn(2, length, 10)
        for got, want in zip(compiled(x), _clamped(x)):
            torch.testing.assert_close(got, want)
    report = torchkiln.report(compiled)
    assert report.num_graphs <= 2 and not report.eager_fallbacks


def test_masked_lm_with_labels_is_one_graph():
    """transformers' heads build their loss module inside forward (CrossEntropyLoss()): made at
    capture time and inlined, not a graph break (and no recompile per call for a new object)."""
    model = tiny_model("BertForMaskedLM", vocab=200, hidden=32, layers=2, heads=2, ffn=64).eval()
    compiled = torchkiln.compile(model, options={"strict": True})
    for _ in range(3):
        ids = torch.randint(0, 200, (2, 16))
        with torch.no_grad():
            out, ref = compiled(input_ids=ids, labels=ids), model(input_ids=ids, labels=ids)
        torch.testing.assert_close(out.loss, ref.loss)
        torch.testing.assert_close(out.logits, ref.logits)
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.graph_breaks


def test_symbolic_size_proved_one_broadcasts():
    """Fuzz seed 22376: ``x[0::3]`` of a dynamic size-3 input has size ``(s0 + 2) // 3``, which the
    trace broadcast as 1 (a guard); loop-ir read it at the output's index instead of 0."""

    def f(x):
        t1 = x.to(torch.float32)
        return torch.where(x[0::3], t1[0:2:3], t1)

    compiled = torchkiln.compile(f, dynamic=True, options={"strict": True})
    for n in (3, 3, 2, 3):
        x = torch.rand(n) > 0.5
        x[0] = False
        torch.testing.assert_close(compiled(x), f(x))
