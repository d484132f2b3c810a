"""Linear layers on the CPU end to end (torchkiln.compile, C++ code generator): oneDNN calls
with a prepacked weight and the activation or residual add fused (loop-ir's mkldnn_linear.py),
equal to eager on fresh random inputs, for every fused pattern, with and without bias, 2-D and
batched 3-D inputs, non-contiguous inputs, frozen and unfrozen parameters, and after a parameter
changes; the per-shape decision is logged."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import torchkiln
from torch import nn
from torchkiln_loop_ir import LoopIROptions
from torchkiln_loop_ir.mkldnn import mkldnn_available
from torchkiln_loop_ir.mkldnn_linear import use_mkldnn_linears

needs_mkldnn = pytest.mark.skipif(not mkldnn_available(), reason="torch built without mkldnn")
TOL = {"rtol": 1e-4, "atol": 1e-5}

ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


class Layer(nn.Module):
    """A linear layer, its activation, and optionally a residual add of the input."""

    def __init__(self, act: str, bias: bool, residual: bool, width: int = 24):
        super().__init__()
        self.fc = nn.Linear(width, width if residual else 40, bias=bias)
        self.act, self.residual = ACTIVATIONS[act], residual

    def forward(self, x):
        y = self.fc(x)
        return x + y if self.residual else self.act(y)


def _compile(model, mode="always", **options):
    return torchkiln.compile(
        model,
        options={
            "strict": True,
            "graph_cache": False,
            "loop_ir": {"mkldnn_linear": mode},
            **options,
        },
    )


def _linears(compiled):
    return torchkiln.report(compiled).graphs[0].linears


@needs_mkldnn
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("shape", [(6, 24), (2, 5, 24)], ids=["2d", "3d"])
def test_activation_epilogue_matches_eager(act, bias, shape):
    model = Layer(act, bias, residual=False).eval()
    compiled = _compile(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    log = "\n".join(_linears(compiled))
    assert "oneDNN linear" in log
    if act != "none":
        assert {"relu": "relu", "gelu": "gelu", "silu": "swish"}[act] + " fused" in log


@needs_mkldnn
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("shape", [(6, 24), (2, 5, 24)], ids=["2d", "3d"])
def test_residual_add_matches_eager(bias, shape):
    model = Layer("none", bias, residual=True).eval()
    compiled = _compile(model)
    with torch.no_grad():
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert "add fused" in "\n".join(_linears(compiled))


class Block(nn.Module):
    """A transformer MLP reading a transposed (non-contiguous) input: GELU, then a residual."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 48), nn.Linear(48, 16)

    def forward(self, x):
        x = x.transpose(0, 1)
        return x + self.down(F.gelu(self.up(x)))


@needs_mkldnn
def test_non_contiguous_input_matches_eager():
    model = Block().eval()
    compiled = _compile(model)
    with torch.no_grad():
        x = torch.randn(7, 3, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)


@needs_mkldnn
@pytest.mark.parametrize("freezing", [True, False], ids=["frozen", "unfrozen"])
def test_parameter_update_after_compile_is_seen(freezing):
    model = Block().eval()
    compiled = _compile(model, freezing=freezing)
    x = torch.randn(5, 2, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        model.up.weight.mul_(-1.5)  # in place: the version counter moves
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        model.load_state_dict(Block().state_dict())
        x2 = torch.randn(5, 2, 16)
        torch.testing.assert_close(compiled(x2), model(x2), **TOL)
    assert torchkiln.report(compiled).num_graphs == 1
    assert any("oneDNN linear" in line for line in _linears(compiled))


@needs_mkldnn
def test_training_step_gradients_match_eager():
    model = Block()
    eager = Block()
    eager.load_state_dict(model.state_dict())
    compiled = _compile(model)
    x = torch.randn(4, 2, 16)
    torch.testing.assert_close(compiled(x), eager(x), **TOL)
    compiled(x).square().sum().backward()
    eager(x).square().sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL)


class Conv1D(nn.Module):
    """GPT-2's linear layer: the weight stored (in, out), ``addmm(b, x, w)``, then GELU."""

    def __init__(self, n_in: int = 16, n_out: int = 40):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) / n_in**0.5)
        self.bias = nn.Parameter(torch.randn(n_out))

    def forward(self, x):
        y = torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        return F.gelu(y.view(*x.shape[:-1], -1))


@needs_mkldnn
def test_conv1d_weight_in_out_matches_eager_and_sees_updates():
    model = Conv1D().eval()
    compiled = _compile(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3, 16)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
        model.weight.add_(1.0)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert "16x40 + bias + gelu fused" in "\n".join(_linears(compiled))


@needs_mkldnn
def test_training_steps_pack_each_orientation_of_a_weight():
    """A training forward reads GPT-2's Conv1D weight as (in, out), its backward reads the same
    tensor transposed: each orientation gets its own packed copy (one shared copy made the second
    step's linear fail in oneDNN). Steps on unchanged weights, gradients as eager's."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=512,
        n_embd=128,
        n_layer=1,
        n_head=4,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    model = transformers.GPT2Model(config)
    eager = copy.deepcopy(model)
    compiled = _compile(model)
    for _ in range(3):
        ids = torch.randint(0, 512, (2, 32))
        compiled(ids).last_hidden_state.square().mean().backward()
        eager(ids).last_hidden_state.square().mean().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL)
            p.grad = q.grad = None


@needs_mkldnn
def test_training_graphs_use_weights_unpacked():
    """A training step's optimizer changes every weight every step, so a packed copy would be
    reordered again on every call (GPT-2 at full size on the CPU: its forward 11% slower than
    eager's, session 34): training graphs give oneDNN the weight as it is. Three steps with
    SGD updates in between, outputs and gradients as eager's, and no weight ever packed."""
    from torchkiln_loop_ir import mkldnn_linear

    model = Conv1D()
    eager = copy.deepcopy(model)
    compiled = _compile(model)
    opt, eager_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager))
    for _ in range(3):
        x = torch.randn(2, 3, 16)
        out, expected = compiled(x), eager(x)
        torch.testing.assert_close(out, expected, **TOL)
        out.square().sum().backward()
        expected.square().sum().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL)
        for o in (opt, eager_opt):
            o.step()
            o.zero_grad()
    log = "\n".join(_linears(compiled))
    assert "oneDNN linear 6x16x40 + bias, weight not packed" in log, log
    assert not mkldnn_linear._PACKED.get(model.weight), "a training graph packed its weight"


def test_never_keeps_addmm_and_matches_eager():
    model = Block().eval()
    compiled = _compile(model, mode="never")
    with torch.no_grad():
        x = torch.randn(3, 2, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    externs = torchkiln.report(compiled).graphs[0].extern_calls
    assert "aten.addmm" in externs and not any("mkldnn" in e for e in externs)


@needs_mkldnn
def test_measured_decision_is_logged_with_timings():
    model = Block().eval()
    compiled = _compile(model, mode="measure")
    with torch.no_grad():
        x = torch.randn(3, 2, 16)  # 6 rows: far too small for oneDNN's fixed cost
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        log = _linears(compiled)
        assert len(log) == 2 and all(".default kept" in line and "MFLOP" in line for line in log), (
            log
        )
        x = torch.randn(256, 2, 16)  # 512 rows: timed at compile time
        model.up, model.down = nn.Linear(16, 768), nn.Linear(768, 16)
        compiled = _compile(model.eval(), mode="measure")
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    log = _linears(compiled)
    # either way the line carries both timings: addmm kept, or oneDNN chosen
    assert len(log) == 2 and all(" us, oneDNN " in line for line in log), log


def test_pass_leaves_other_matmuls_and_says_why():
    def f(x, y, w):
        return torch.mm(x, y) + F.linear(x, w.exp())

    gm = torch.fx.symbolic_trace(lambda x, y: torch.mm(x, y))
    assert use_mkldnn_linears(gm, "never") == (gm, ())
    compiled = torchkiln.compile(
        f, options={"strict": True, "graph_cache": False, "loop_ir": {"mkldnn_linear": "always"}}
    )
    x, y, w = torch.randn(4, 6), torch.randn(6, 3), torch.randn(3, 6)
    torch.testing.assert_close(compiled(x, y, w), f(x, y, w), **TOL)
    log = "\n".join(_linears(compiled))
    if mkldnn_available():
        assert "not a transposed weight" in log and "computed in the graph" in log


def test_bad_mode_is_a_typed_error():
    with pytest.raises(ValueError, match="mkldnn_linear"):
        LoopIROptions(mkldnn_linear="sometimes")


class QKV(nn.Module):
    """Attention's three projections of one input (3-D: each flattens it with its own view),
    and a gated MLP's two, as in Llama."""

    def __init__(self, bias: bool, return_key: bool = False):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(16, 16, bias=bias) for _ in range(3))
        self.gate, self.up = nn.Linear(16, 24, bias=bias), nn.Linear(16, 24, bias=bias)
        self.return_key = return_key

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (p(x).view(b, t, 2, 8).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        out = (a, F.silu(self.gate(a)) * self.up(a))
        return (*out, k) if self.return_key else out


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("mode", ["never", "always"])
@pytest.mark.parametrize("freezing", [True, False], ids=["frozen", "unfrozen"])
def test_grouped_linears_match_eager_and_see_updates(bias, mode, freezing):
    if mode == "always" and not mkldnn_available():
        pytest.skip("torch built without mkldnn")
    model = QKV(bias).eval()
    compiled = _compile(model, mode=mode, freezing=freezing)
    with torch.no_grad():
        x = torch.randn(2, 5, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        model.k.weight.mul_(2.0)
        model.up.load_state_dict(nn.Linear(16, 24, bias=bias).state_dict())
        x = torch.randn(2, 5, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    log = "\n".join(_linears(compiled))
    assert "3 linears" in log and "2 linears" in log, log
    assert "linear_group" in " ".join(torchkiln.report(compiled).graphs[0].extern_calls)


def test_returned_strided_projection_is_not_grouped():
    model = QKV(True, return_key=True).eval()
    compiled = _compile(model, mode="never")
    with torch.no_grad():
        x = torch.randn(2, 5, 16)
        out, expected = compiled(x), model(x)
        torch.testing.assert_close(out, expected, **TOL)
        assert out[2].stride() == expected[2].stride()  # the caller sees eager's strides
    assert "not grouped" in "\n".join(_linears(compiled))


def test_training_steps_keep_separate_linears_with_eager_gradients():
    """A training step's linears are not grouped: its optimizer changes the weights every step,
    so the concatenated weight would be rebuilt on every call (a small Llama's CPU forward at
    batch 32 took 15.4 ms grouped, 8.7 ms not). Two steps with an optimizer between them,
    values and gradients against eager's."""
    model, eager = QKV(True), QKV(True)
    eager.load_state_dict(model.state_dict())
    compiled = _compile(model, mode="never")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    for _ in range(2):
        x = torch.randn(2, 5, 16)
        out, expected = compiled(x), eager(x)
        torch.testing.assert_close(out, expected, **TOL)
        sum(o.square().sum() for o in out).backward()
        sum(o.square().sum() for o in expected).backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL)
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
    report = torchkiln.report(compiled)
    externs = " ".join(e for g in report.graphs for e in g.extern_calls)
    assert "linear_group" not in externs, externs
    assert any("not grouped: a training step" in line for line in _linears(compiled))


def test_group_linears_off_keeps_separate_gemms():
    model = QKV(True).eval()
    compiled = torchkiln.compile(
        model,
        options={
            "strict": True,
            "graph_cache": False,
            "loop_ir": {"mkldnn_linear": "never", "group_linears": False},
        },
    )
    with torch.no_grad():
        x = torch.randn(2, 5, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    externs = torchkiln.report(compiled).graphs[0].extern_calls
    assert not any("linear_group" in e for e in externs) and externs.count("aten.addmm") == 5


_CACHED_RUN = """
import sys, torch, torchkiln
sys.path.insert(0, {tests!r})
from test_cpu_linear import QKV, Layer
torch.manual_seed(0)
model = torch.nn.Sequential(Layer("gelu", True, False), torch.nn.Linear(40, 16), QKV(True)).eval()
compiled = torchkiln.compile(model, options={{"strict": True, "loop_ir": {{"mkldnn_linear": "always"}}}})
with torch.no_grad():
    x = torch.randn(2, 5, 24)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    model[2].q.weight.mul_(0.5)
    model[0].fc.weight.mul_(0.5)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
graph = torchkiln.report(compiled).graphs[0]
print(graph.cache, sorted(e for e in graph.extern_calls if e.startswith("torchkiln")))
"""


def test_graph_cache_keeps_grouped_and_onednn_linears(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TORCHKILN_CACHE_DIR": str(tmp_path)}
    code = _CACHED_RUN.format(tests=str(Path(__file__).parent))
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
        for _ in range(2)
    ]
    assert runs[0].startswith("miss") and runs[1].startswith("hit"), runs
    if mkldnn_available():
        assert "torchkiln.linear_group" in runs[1] and "torchkiln.mkldnn_linear" in runs[1], runs
