"""module_proxy.py: the one nn.Module proxy (capture's CapturedModule; the meta-package's
CompiledModule subclasses the same ModuleProxy). Each behaviour is compared with the original
module run eagerly on fresh inputs."""

from __future__ import annotations

import torch
from torchkiln_dynamo_capture import CapturedModule, ModuleProxy, capture


def _as_traced(gm, example_inputs):
    return gm.forward


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(6, 6), torch.nn.GELU(), torch.nn.Linear(6, 3)
        )
        self.register_buffer("shift", torch.randn(3))
        self.scale = 2.0
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.layers(x) * self.scale + self.shift)


def test_parameters_buffers_and_state_dict_are_the_originals():
    net = Net()
    proxy = capture(net, _as_traced)
    assert isinstance(proxy, CapturedModule) and isinstance(proxy, ModuleProxy)
    assert [(n, id(p)) for n, p in proxy.named_parameters()] == [
        (n, id(p)) for n, p in net.named_parameters()
    ]
    assert [id(p) for p in proxy.parameters()] == [id(p) for p in net.parameters()]
    assert [(n, id(b)) for n, b in proxy.named_buffers()] == [
        (n, id(b)) for n, b in net.named_buffers()
    ]
    assert proxy.state_dict().keys() == net.state_dict().keys()
    new = {k: torch.randn_like(v) for k, v in net.state_dict().items()}
    proxy.load_state_dict(new)
    torch.testing.assert_close(net.layers[0].weight, new["layers.0.weight"])
    proxy.eval()
    x = torch.randn(4, 6)
    torch.testing.assert_close(proxy(x), net(x))


def test_attributes_are_read_set_and_deleted_on_the_original():
    net = Net().eval()
    proxy = capture(net, _as_traced)
    x = torch.randn(4, 6)
    torch.testing.assert_close(proxy(x), net(x))
    assert proxy.scale == 2.0 and proxy.layers is net.layers
    proxy.scale = 3.0  # the compiled forward sees it, as torch.compile's wrapper's does
    assert net.scale == 3.0
    torch.testing.assert_close(proxy(x), net(x))
    proxy.note = "kept"
    assert net.note == "kept" and "note" not in proxy.__dict__
    del proxy.note
    assert not hasattr(net, "note")
    assert "scale" in dir(proxy) and "forward" in dir(proxy)


def test_training_mode_is_the_originals():
    net = Net()
    proxy = capture(net, _as_traced)
    assert proxy.training and net.training
    assert proxy.eval() is proxy
    assert not proxy.training and not net.training and not net.drop.training
    net.train()  # a change made on the original shows through the proxy
    assert proxy.training
    x = torch.randn(4, 6)
    proxy.eval()
    torch.testing.assert_close(proxy(x), net(x))


def test_indexing_len_and_iteration_are_the_originals():
    seq = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    proxy = capture(seq, _as_traced)
    assert len(proxy) == 3 and proxy[0] is seq[0] and list(proxy) == list(seq)
    x = torch.randn(3, 5)
    torch.testing.assert_close(proxy(x), seq(x))


def test_hooks_on_the_proxy_run_around_the_captured_forward():
    net = Net().eval()
    proxy = capture(net, _as_traced)
    calls = []

    def pre(module, args):
        calls.append(("pre", module is proxy))
        return (args[0] * 2.0,)

    def post(module, args, output):
        calls.append(("forward", module is proxy))
        return output + 1.0

    def backward(module, grad_input, grad_output):
        calls.append(("backward", module is proxy))

    handles = [
        proxy.register_forward_pre_hook(pre),
        proxy.register_forward_hook(post),
        proxy.register_full_backward_hook(backward),
    ]
    assert net._is_full_backward_hook is None  # registering on the proxy leaves the original alone
    x = torch.randn(4, 6, requires_grad=True)
    out = proxy(x)
    out.sum().backward()
    torch.testing.assert_close(out, net(x * 2.0) + 1.0)
    assert calls == [("pre", True), ("forward", True), ("backward", True)]
    for h in handles:
        h.remove()
    calls.clear()
    torch.testing.assert_close(proxy(x), net(x))
    assert calls == []


def test_global_module_hooks_fire_for_the_proxy_as_for_torch_compiles_wrapper():
    net = Net().eval()
    proxy = capture(net, _as_traced)
    x = torch.randn(4, 6)
    want = net(x)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: seen.append(type(module).__name__)
    )
    try:
        got = proxy(x)
    finally:
        handle.remove()
    torch.testing.assert_close(got, want)
    assert (
        seen[-1] == "CapturedModule"
    )  # once for the proxy, after its forward, as OptimizedModule's


def test_to_reaches_the_original_and_repr_names_the_proxy():
    net = Net().eval()
    proxy = capture(net, _as_traced)
    assert proxy.to(torch.float64) is proxy
    assert net.layers[0].weight.dtype == torch.float64 and net.shift.dtype == torch.float64
    x = torch.randn(4, 6, dtype=torch.float64)
    torch.testing.assert_close(proxy(x), net(x))
    assert repr(proxy).startswith("CapturedModule(Net(")
