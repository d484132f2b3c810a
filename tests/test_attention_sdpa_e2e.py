"""The zoo's hand-written attention (vit, gpt, llama_block) through torchkiln.compile on the CPU: captured,
routed to scaled_dot_product_attention by aot-partition's attention.py, compiled with the C++
code generator; outputs equal eager on fresh inputs, and the SDPA kernel replaces the matmuls."""

from __future__ import annotations

import pytest
import torch
import torchkiln
from torchkiln.bench import zoo

SDPA = "aten._scaled_dot_product_flash_attention_for_cpu"


def _compiled(name, dtype, **options):
    model, inputs = zoo.build(name, 2, 0)
    model = model.to(dtype)
    inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    compiled = torchkiln.compile(model, options={"strict": True, **options})
    with torch.no_grad():
        compiled(*inputs)
    (graph,) = torchkiln.report(compiled).graphs
    return model, compiled, graph


def _fresh(name, dtype, seed):
    _, inputs = zoo.build(name, 2, seed)
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


@pytest.mark.parametrize("name", ["gpt", "vit", "llama_block"])
def test_zoo_attention_runs_as_sdpa(name):
    model, compiled, graph = _compiled(name, torch.float32)
    assert graph.extern_calls.count(SDPA) == (2 if name != "llama_block" else 1), graph.extern_calls
    assert "aten.bmm" not in graph.extern_calls
    for seed in (1, 2):
        inputs = _fresh(name, torch.float32, seed)
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), model(*inputs), rtol=1e-4, atol=1e-4)


def test_zoo_gpt_bfloat16_is_as_close_to_fp64_as_eager():
    model, compiled, graph = _compiled("gpt", torch.bfloat16)
    assert SDPA in graph.extern_calls
    inputs = _fresh("gpt", torch.bfloat16, 3)
    with torch.no_grad():
        out, eager = compiled(*inputs), model(*inputs)
        reference = model.double()(*inputs)

    def rmse(a):
        return (a.double() - reference).pow(2).mean().sqrt().item()

    assert rmse(out) <= 2 * rmse(eager) + 1e-2, (rmse(out), rmse(eager))


def test_option_off_keeps_the_matmuls():
    _, _, graph = _compiled("gpt", torch.float32, sdpa_attention=False)
    assert SDPA not in graph.extern_calls
    assert "aten.bmm" in graph.extern_calls
