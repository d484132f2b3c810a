"""Real models through aot-partition -> loop-ir -> codegen-cpp, against eager (issue 6).

Each model (the bundled zoo and five tiny transformers models, random weights, eval mode) is
traced to an ATen graph with aot-partition's ``aten_graph`` and compiled with ``CppBackend``; the
output must match eager at fp32 tolerances and nothing may run as an ATen fallback: only the
named extern kernels below.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torchkiln_loop_ir as L
from tiny_transformers import tiny_model
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_aot_partition import aten_graph
from torchkiln_codegen_cpp import CppBackend

ALLOWED_EXTERNS = {
    "aten.mm",
    "aten.bmm",
    "aten.addmm",
    "aten.baddbmm",
    "aten.convolution",
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten.randint.low",
    # CPU convolutions through oneDNN (loop-ir's mkldnn.py)
    "torchkiln.mkldnn_convolution",
    "torchkiln.mkldnn_convolution_add",
    # CPU linear layers: grouped by input, or through oneDNN (linear_group.py, mkldnn_linear.py)
    "torchkiln.linear_group",
    "torchkiln.mkldnn_linear",
    "torchkiln.mkldnn_linear_add",
}


def _zoo():
    # Loaded from its file: the zoo needs only torch, and the rest of the meta-package is not
    # under test here.
    path = Path(__file__).resolve().parents[1] / "packages/torchkiln/src/torchkiln/bench/zoo.py"
    spec = importlib.util.spec_from_file_location("_torchkiln_zoo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ZOO = _zoo()


#: five tiny transformers models, random weights (seed 0)
HF_MODELS = {
    "bert": lambda: tiny_model(
        "BertModel", vocab=99, hidden=32, layers=2, heads=4, ffn=37, positions=64
    ),
    "gpt2": lambda: tiny_model("GPT2Model", vocab=99, hidden=32, layers=2, heads=4, positions=64),
    "t5_encoder": lambda: tiny_model(
        "T5EncoderModel", vocab=99, hidden=32, layers=2, heads=4, ffn=37, d_kv=8
    ),
    "distilbert": lambda: tiny_model(
        "DistilBertModel", vocab=99, hidden=32, layers=2, heads=4, ffn=37, positions=64
    ),
    "llama": lambda: tiny_model(
        "LlamaModel", vocab=99, hidden=32, layers=2, heads=4, ffn=37, positions=64, kv_heads=2
    ),
}
HF_NAMES = list(HF_MODELS)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))


def _compile(fn, example):
    """torch-level graph of ``fn`` (make_fx, no decompositions) -> aten_graph -> CppBackend."""
    with torch.no_grad():
        torch_gm = make_fx(fn)(*example)
        gm, aten_inputs = aten_graph(torch_gm, list(example), decompositions=L.decompositions())
        cg = L.compile_graph(gm, aten_inputs, CppBackend())
    n_lifted = len(aten_inputs) - len(example)
    return cg, aten_inputs[:n_lifted]


def _functional(model, n_state):
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = list(state)

    def fn(*args):
        out = torch.func.functional_call(
            model, dict(zip(names, args[:n_state])), tuple(args[n_state:])
        )
        out = getattr(out, "last_hidden_state", out)
        return (out,)

    return fn, [v.detach() for v in state.values()]


def _check(model, inputs, fresh_inputs, atol):
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    fn, values = _functional(model, len(state))
    cg, lifted = _compile(fn, values + list(inputs))
    with torch.no_grad():
        got = cg(*lifted, *values, *fresh_inputs)[0]
        want = fn(*values, *fresh_inputs)[0]
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-4)
    assert cg.fallbacks == [], cg.fallbacks
    assert set(cg.extern_calls) <= ALLOWED_EXTERNS, cg.extern_calls
    assert cg.num_kernels > 0
    return cg


@pytest.mark.parametrize("name", list(ZOO.MODELS))
def test_zoo_model_through_cpp(name):
    model, inputs = ZOO.build(name, batch=2, seed=0)
    _, fresh = ZOO.build(name, batch=2, seed=1)  # same shapes, other values
    _check(model, inputs, fresh, atol=1e-4)


@pytest.mark.parametrize("name", HF_NAMES)
def test_transformers_model_through_cpp(name):
    model = HF_MODELS[name]().eval()
    ids = torch.randint(0, 99, (2, 9))
    _check(model, [ids], [torch.randint(0, 99, (2, 9))], atol=1e-4)
