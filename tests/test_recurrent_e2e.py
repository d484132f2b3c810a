"""Recurrent modules (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) through torchkiln.compile, against
eager on fresh inputs, in inference under no_grad and with grad on, and in training (every
parameter's gradient).

On the CPU a recurrent module is in the graph: an LSTM runs oneDNN's ``mkldnn_rnn_layer`` in
eager and in the compiled graph. Three things made that fail before (timm's sequencer2d_s fell
back on 8 graphs):
- its forward reaches its weights through weak references (``_flat_weight_refs``), which broke
  the graph;
- its fourth output, a workspace, is traced empty but is 28672 values (or None under no_grad)
  when it runs;
- the kernel makes that workspace only when grad mode is on, and a training forward runs with
  it off.

On CUDA the recurrent op breaks the graph (capture's ``trace_rules.runs_recurrent_eagerly``):
ATen's cuDNN path views the weights' storage with ``set_(storage)``, which no FX graph holds,
and every graph holding one ran eagerly. The module runs eagerly with cuDNN and the layers
around it compile. The break is tested on the CPU too, with the CPU added to
``RECURRENT_EAGER_DEVICES``, so CI runs the path the GPU takes."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from torch import nn
from torchkiln_dynamo_capture import trace_rules

pytestmark = pytest.mark.usefixtures("private_cache_dir")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
_OLD_TORCH = torch.torch_version.TorchVersion(torch.__version__) < "2.13"


@pytest.fixture(params=["graph", "break"])
def recurrent_path(request, monkeypatch):
    """ "graph": each device as it is (the CPU in the graph, CUDA breaking); "break": the CPU
    breaks too, as CUDA does."""
    if request.param == "break":
        monkeypatch.setattr(trace_rules, "RECURRENT_EAGER_DEVICES", ("cuda", "cpu"))
    return request.param


def _breaks(device: str, path: str) -> bool:
    return device == "cuda" or path == "break"


MODULES = {
    "lstm": lambda: nn.LSTM(8, 16),
    "lstm-2-layers-bidirectional": lambda: nn.LSTM(
        8, 16, num_layers=2, bidirectional=True, batch_first=True
    ),
    "lstm-projection": lambda: nn.LSTM(8, 16, proj_size=4),
    "lstm-no-bias": lambda: nn.LSTM(8, 16, bias=False),
    "gru-bidirectional": lambda: nn.GRU(8, 16, bidirectional=True),
    "rnn-relu": lambda: nn.RNN(8, 16, nonlinearity="relu"),
}


def _input(m: nn.Module, requires_grad: bool = False) -> torch.Tensor:
    shape = (2, 5, 8) if m.batch_first else (5, 2, 8)
    device = next(m.parameters()).device
    return torch.randn(*shape, device=device, requires_grad=requires_grad)


def _flat(out) -> list[torch.Tensor]:
    y, h = out
    return [y, *(h if isinstance(h, tuple) else (h,))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(MODULES))
def test_inference_matches(name, device, recurrent_path):
    torch.manual_seed(0)
    m = MODULES[name]().to(device).eval()
    explained = torchkiln.explain(m)(_input(m))
    if _breaks(device, recurrent_path):
        assert explained.graph_break_count > 0
        assert all("torch._VF." in str(b) for b in explained.break_reasons), explained
    else:
        assert explained.graph_break_count == 0
    compiled = torchkiln.compile(m, options={"strict": True})
    for grad in (False, True):  # under no_grad the workspace is None; with grad on, a tensor
        with torch.set_grad_enabled(grad):
            for _ in range(2):
                x = _input(m)
                got, want = _flat(compiled(x)), _flat(m(x))
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w)
                    assert g.requires_grad == w.requires_grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_training_gradients_match(name, mode, device, recurrent_path):
    if name == "lstm-no-bias" and device == "cpu" and recurrent_path == "graph" and _OLD_TORCH:
        pytest.xfail(
            "torch before 2.13: the meta function of mkldnn_rnn_layer_backward gives a bias "
            "gradient of the wrong shape, which the compiled graph's check of its extern "
            "outputs refuses (OutputShapeChanged)"
        )
    torch.manual_seed(0)
    m = MODULES[name]().to(device).train(mode == "train")
    ref = copy.deepcopy(m)
    compiled = torchkiln.compile(m, options={"strict": True})
    for _ in range(2):
        x = _input(m, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        got, want = _flat(compiled(x)), _flat(ref(x_ref))
        weights = [torch.randn_like(w) for w in want]
        loss = sum((g * w).sum() for g, w in zip(got, weights))
        loss_ref = sum((g * w).sum() for g, w in zip(want, weights))
        try:
            grads_ref = torch.autograd.grad(loss_ref, [x_ref, *ref.parameters()])
        except RuntimeError:  # cuDNN's RNN backward in eval mode: eager raises, so must we
            with pytest.raises(RuntimeError):
                torch.autograd.grad(loss, [x, *m.parameters()])
            return
        grads = torch.autograd.grad(loss, [x, *m.parameters()])
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        for g, w in zip(grads, grads_ref):
            torch.testing.assert_close(g, w)
