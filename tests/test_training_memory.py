"""Memory of compiled training and inference against eager on transformer models (transformers'
BERT and GPT-2 at a reduced width, SDPA attention; a ViT for inference): what the forward saves
for the backward is at most eager's, gradients equal eager's on fresh inputs, and the compiled
inference graph's plan holds no per-layer buffer to the end."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from torchkiln_aot_partition import saved_tensor_bytes

transformers = pytest.importorskip("transformers")


def _small(kind: str) -> torch.nn.Module:
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=512,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=512,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            attn_implementation="sdpa",
        )
        return transformers.BertModel(config, add_pooling_layer=False)  # as BertForMaskedLM
    config = transformers.GPT2Config(
        vocab_size=512,
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
        attn_implementation="sdpa",
    )
    return transformers.GPT2Model(config)


def _autocast(dtype: str):
    return (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if dtype == "bf16"
        else torch.autocast("cpu", enabled=False)
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_saved_bytes_at_most_eager_and_gradients_match(kind, dtype):
    torch.manual_seed(0)
    model = _small(kind).train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True})

    def loss(m, ids):
        with _autocast(dtype):
            return m(ids).last_hidden_state.float().square().mean()

    loss(compiled, torch.randint(0, 512, (2, 32))).backward()  # compile
    model.zero_grad(set_to_none=True)
    ids = torch.randint(0, 512, (2, 32))  # fresh inputs
    held = [*model.parameters(), *ref.parameters(), ids]
    ours_loss, ours = saved_tensor_bytes(loss, compiled, ids, held=held)
    eager_loss, eager = saved_tensor_bytes(loss, ref, ids, held=held)
    assert ours.activations <= eager.activations, (ours, eager)
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == "bf16" else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours_loss, eager_loss, **tol)
    ours_loss.backward()
    eager_loss.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}", **tol)
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not [f for g in report.graphs for f in g.fallbacks]


def _vit_inference(layers: int):
    """A ViT (transformers' ViTModel, reduced width) compiled for bf16 autocast inference through
    aot-partition and loop-ir; returns (model, compiled runtime, loop-ir CompiledGraph, pixels)."""
    import torchkiln_codegen_cpp as cpp
    import torchkiln_loop_ir as L
    from torchkiln_aot_partition import aot_compile
    from torchkiln_dynamo_capture import capture

    config = transformers.ViTConfig(
        hidden_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=512,
        image_size=64,
        patch_size=16,
        attn_implementation="sdpa",
    )
    model = transformers.ViTModel(config, add_pooling_layer=False).eval()
    graphs, runtimes = [], []

    def fw_compiler(gm, inputs):
        graphs.append(L.compile_graph(gm, inputs, backend=cpp.CppBackend()))
        return graphs[-1]

    def backend(gm, example_inputs):
        runtimes.append(
            aot_compile(
                gm, example_inputs, fw_compiler=fw_compiler, decompositions=L.decompositions()
            )
        )
        return runtimes[-1]

    compiled = capture(lambda m, x: m(pixel_values=x).last_hidden_state, backend=backend)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        compiled(model, torch.randn(4, 3, 64, 64))
    assert len(graphs) == 1
    return model, compiled, runtimes[0], graphs[0]


def test_vit_inference_folded_casts_and_peak_independent_of_depth():
    torch.manual_seed(0)
    peaks = []
    for layers in (2, 4):
        model, compiled, runtime, graph = _vit_inference(layers)
        x = torch.randn(4, 3, 64, 64)  # fresh input
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            torch.testing.assert_close(
                compiled(model, x), model(pixel_values=x).last_hidden_state, atol=5e-2, rtol=5e-2
            )
        # the folded constants are the bfloat16 copies of the weights and biases that eager's
        # autocast cache holds during a forward (transposes are views of them, not copies)
        cache = sum(p.numel() * 2 for n, p in model.named_parameters() if "layernorm" not in n)
        assert 0 < runtime.folded.nbytes() <= cache
        peaks.append(_planned_peak(graph))
    # every layer's activations die inside it: two more layers add less than one activation
    # (4 x 17 tokens x 128 bf16 values) to the plan's peak; q, k, v and the attention output of
    # every layer were held to the end before (four activations a layer)
    assert abs(peaks[1] - peaks[0]) < 4 * 17 * 128 * 2, peaks


def _planned_peak(graph) -> int:
    import torchkiln_loop_ir as L

    peak = L.planned_peak_bytes(graph.scheduled)
    assert peak is not None and peak > 0
    return peak


def test_bert_with_dropout_saves_at_most_eager():
    """Dropout on (BERT's defaults): the compiled forward draws its own masks (codegen's
    Philox, not eager's generator), so values cannot equal eager's; the saved bytes are compared
    with eager's, the loss with eager's scale, and every gradient is present and finite.
    (aot-partition's test_dropout_mask_saved_as_bool checks a gradient through the drawn mask.)"""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=512,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=512,
        attn_implementation="sdpa",
    )
    model = transformers.BertModel(config, add_pooling_layer=False).train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True})

    def loss(m, ids):
        with _autocast("bf16"):
            return m(ids).last_hidden_state.float().square().mean()

    loss(compiled, torch.randint(0, 512, (2, 32))).backward()
    model.zero_grad(set_to_none=True)
    ids = torch.randint(0, 512, (2, 32))
    held = [*model.parameters(), *ref.parameters(), ids]
    ours_loss, ours = saved_tensor_bytes(loss, compiled, ids, held=held)
    eager_loss, eager = saved_tensor_bytes(loss, ref, ids, held=held)
    assert ours.activations <= eager.activations, (ours, eager)
    torch.testing.assert_close(ours_loss, eager_loss, atol=0.3, rtol=0.3)  # other masks, same scale
    ours_loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
