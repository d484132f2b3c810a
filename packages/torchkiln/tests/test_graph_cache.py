"""The persistent graph cache: a new process compiling the same model skips aot-partition,
lowering, scheduling and codegen, and gets eager's results; a damaged entry is compiled again;
anything in the key (input dtype/shape, options) that changes misses."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchkiln
from torchkiln import graph_cache

HERE = Path(__file__).parent
COMPILING = {"aot", "lowering", "scheduling", "codegen"}


def _model_module():
    spec = importlib.util.spec_from_file_location("_cache_model", HERE / "_cache_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


model = _model_module()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("graph-cache"))


def _entries(cache_dir: str) -> list[Path]:
    return sorted((Path(cache_dir) / "graphs").glob("*.bin"))


def _in_subprocess(cache_dir: str, train: bool, batch: int) -> dict:
    env = dict(os.environ, TORCHKILN_CACHE_DIR=cache_dir)
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "_cache_model.py"),
            cache_dir,
            "train" if train else "infer",
            str(batch),
            "--forbid-compiling",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_new_process_reuses_the_training_step_without_compiling(cache_dir) -> None:
    cold = model.run(cache_dir, train=True, batch=5)
    assert cold["cache"] == ["miss"] and cold["error"] < 1e-4
    assert COMPILING <= set(cold["phases"][0]) and "cache_store" in cold["phases"][0]
    assert len(_entries(cache_dir)) == 1  # stored once the backward graph had compiled

    # aot_compile and compile_graph raise in that process: it must not call them
    warm = _in_subprocess(cache_dir, train=True, batch=5)
    assert warm["cache"] == ["hit"], warm
    assert warm["error"] < 1e-4  # against eager on its own fresh random input
    assert not COMPILING & set(warm["phases"][0]) and "cache_load" in warm["phases"][0]
    assert warm["kernels"] == cold["kernels"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "bad pickle"])
def test_a_damaged_entry_is_compiled_again(cache_dir, damage) -> None:
    batch = {"truncate": 6, "garbage": 7, "bad pickle": 9}[damage]
    before = set(_entries(cache_dir))
    first = model.run(cache_dir, train=False, batch=batch)
    assert first["cache"] == ["miss"]
    (entry,) = set(_entries(cache_dir)) - before
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(os.urandom(len(data)))
    else:  # a valid checksum over a payload that is not a pickle
        import hashlib

        payload = b"not a pickle at all"
        entry.write_bytes(graph_cache.MAGIC + hashlib.sha256(payload).digest() + payload)
    again = model.run(cache_dir, train=False, batch=batch)
    assert again["cache"][0].startswith("corrupt"), again
    assert again["error"] < 1e-4 and COMPILING <= set(again["phases"][0])
    third = model.run(cache_dir, train=False, batch=batch)  # the rebuilt entry was stored
    assert third["cache"] == ["hit"] and third["error"] < 1e-4


def test_what_the_key_covers_misses(cache_dir) -> None:
    base = model.run(cache_dir, train=False, batch=3)
    assert base["cache"] == ["miss"]
    assert model.run(cache_dir, train=False, batch=3)["cache"] == ["hit"]
    changed = [
        model.run(cache_dir, train=False, batch=4),  # an input shape
        model.run(cache_dir, train=False, batch=3, dtype=torch.float64),  # dtypes
        model.run(cache_dir, train=False, batch=3, max_fusions=0),  # an option
        model.run(cache_dir, train=True, batch=3),  # requires_grad / grad mode: training
    ]
    for result in changed:
        assert result["cache"] == ["miss"], result
        assert result["error"] < 1e-4


def test_the_option_turns_the_cache_off(cache_dir) -> None:
    result = model.run(cache_dir, train=False, batch=11, graph_cache=False)
    assert result["cache"][0].startswith("off") and result["error"] < 1e-4
    assert model.run(cache_dir, train=False, batch=11)["cache"] == ["miss"]


def _helper(x):  # a Python function called from a graph: its body is not in gm.code
    return x * 2


def test_graphs_whose_code_is_not_in_their_text_are_not_cached() -> None:
    import torchkiln_codegen_cpp

    backend = torchkiln_codegen_cpp.CppBackend()
    options = torchkiln.CompileOptions()
    with_module = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    with pytest.raises(graph_cache.NotCached, match="call_module"):
        graph_cache.graph_key(with_module, [torch.randn(2, 4)], options, backend, None)
    graph = torch.fx.Graph()
    graph.output(graph.call_function(_helper, (graph.placeholder("x"),)))
    with_function = torch.fx.GraphModule({}, graph)
    with pytest.raises(graph_cache.NotCached, match="outside torch"):
        graph_cache.graph_key(with_function, [torch.randn(2, 4)], options, backend, None)

    class Scale:  # an argument whose repr may not show its state
        factor = 3.0

        def __repr__(self) -> str:
            return "3.0"

    graph = torch.fx.Graph()
    graph.output(graph.call_function(torch.mul, (graph.placeholder("x"), Scale())))
    with pytest.raises(graph_cache.NotCached, match="Scale argument"):
        graph_cache.graph_key(
            torch.fx.GraphModule({}, graph), [torch.randn(2)], options, backend, None
        )


def test_the_key_follows_input_metadata() -> None:
    import torchkiln_codegen_cpp

    gm = torch.fx.symbolic_trace(lambda x, y: torch.relu(x) + y)
    backend = torchkiln_codegen_cpp.CppBackend()
    options = torchkiln.CompileOptions()

    def key(*inputs):
        return graph_cache.graph_key(gm, list(inputs), options, backend, None)

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    assert key(x, y) == key(torch.randn(4, 4), torch.randn(4, 4))  # values are not in the key
    others = [
        key(x.t(), y),  # strides
        key(x, x),  # the inputs share storage
        key(x.requires_grad_(False)[1:], y[1:]),  # shape and storage offset
        key(x.double(), y),
        key(x.clone().requires_grad_(), y),
    ]
    assert len({key(x, y), *others}) == len(others) + 1
    grad_mode_on = key(x, y)
    with torch.no_grad():
        assert key(x, y) != grad_mode_on  # grad mode


def test_a_hit_rebuilds_a_kernel_library_the_build_cache_lost(cache_dir) -> None:
    import shutil

    assert model.run(cache_dir, train=False, batch=13)["cache"] == ["miss"]
    shutil.rmtree(Path(cache_dir) / "cpp")  # the entry keeps the library's source
    again = model.run(cache_dir, train=False, batch=13)
    assert again["cache"] == ["hit"] and again["error"] < 1e-4
    assert any((Path(cache_dir) / "cpp").rglob("*.so"))


def test_a_hit_keeps_the_synthetic_base_of_mutated_aliased_inputs(tmp_path) -> None:
    """Inputs that share a storage and are mutated are compiled over one base (aot-partition's
    aliasing.py); a cache hit must rebuild the runtime with that base, not call the graph with
    the aliases themselves (it raised "too many values to unpack" and ran eagerly)."""

    def g(a, b):
        a.add_(1)
        return b * 2

    for expected in ("miss", "hit"):
        compiled = torchkiln.compile(g, options={"strict": True, "cache_dir": str(tmp_path)})
        t = torch.randn(6)
        te = t.clone()
        want = g(te[1:], te[:4])
        got = compiled(t[1:], t[:4])
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(t, te)
        report = torchkiln.report(compiled)
        assert [gr.cache for gr in report.graphs] == [expected] and not report.eager_fallbacks


def test_a_backward_specialised_on_unused_outputs_is_not_stored_as_the_backward(tmp_path) -> None:
    """When the first backward leaves an output unused, aot-partition compiles a backward
    specialised on its None tangent (fewer inputs and gradients): it must not be stored as the
    graph's backward, or a hit would call it with every tangent. The next process compiles
    again (miss) and its gradients, the full pattern's included, are eager's."""

    def g(x, w):
        h = x @ w
        return h.sin(), h.cos() * 2

    def run():
        compiled = torchkiln.compile(g, options={"strict": True, "cache_dir": str(tmp_path)})
        x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
        wr = w.detach().clone().requires_grad_(True)
        compiled(x, w)[0].sum().backward()  # the second output unused
        g(x, wr)[0].sum().backward()
        torch.testing.assert_close(w.grad, wr.grad)
        w.grad = wr.grad = None
        a, b = compiled(x, w)
        (a.sum() + b.sum()).backward()
        a, b = g(x, wr)
        (a.sum() + b.sum()).backward()
        torch.testing.assert_close(w.grad, wr.grad)
        report = torchkiln.report(compiled)
        assert not report.eager_fallbacks
        return [gr.cache for gr in report.graphs]

    first, second = run(), run()
    assert first[0].startswith("miss") and "not stored" in first[0]
    assert second[0].startswith("miss")


def test_a_hit_keeps_the_hidden_base_of_views_of_an_intermediate(tmp_path) -> None:
    """Views of an intermediate the graph does not return are rebuilt from it, returned as a
    hidden output (aot-partition's view_bases.py): a hit must drop that output too and rebuild
    the views from it (values and aliasing as eager's). (Training graphs with aliased outputs
    are not stored: their first backward is specialised on the views' absent tangents.)"""

    def g(x):
        t = x.exp()
        return t[1:], t[:-1]

    for expected in ("miss", "hit"):
        compiled = torchkiln.compile(g, options={"strict": True, "cache_dir": str(tmp_path)})
        x = torch.randn(6)
        want, got = g(x), compiled(x)
        assert len(got) == 2 and got[0]._base is got[1]._base and got[0]._base.shape == (6,)
        for w, o in zip(want, got):
            torch.testing.assert_close(o, w)
        got[0].mul_(2)
        want[0].mul_(2)
        torch.testing.assert_close(got[1], want[1])  # the write reached the other view
        report = torchkiln.report(compiled)
        assert [gr.cache for gr in report.graphs] == [expected] and not report.eager_fallbacks
