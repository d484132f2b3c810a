"""Helpers of the convolution passes' end-to-end tests (direct and depthwise convolutions):
the code generators a CPU run can execute, a compile with the channels-last pass forced, the
convolution decisions' log, and calls and training steps checked against eager's."""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torchkiln


def codegens() -> list:
    """C++, and Triton where its interpreter runs kernels (``TRITON_INTERPRET=1``)."""
    out = [pytest.param("cpp", id="cpp")]
    if os.environ.get("TRITON_INTERPRET") not in (None, "", "0"):
        out.append(pytest.param("triton", id="triton"))
    return out


def compile_convnet(model, codegen: str, **loop_ir):
    """``torchkiln.compile`` in strict mode without the graph cache, the channels-last pass
    forced on any device (oneDNN's convolutions off), and the loop-ir options ``loop_ir``."""
    options = {"channels_last": "always", "mkldnn_convolution": False} | loop_ir
    return torchkiln.compile(
        model,
        options={"strict": True, "graph_cache": False, "codegen": codegen, "loop_ir": options},
    )


def convolution_log(compiled) -> list[str]:
    """Every graph's convolution decisions (``torchkiln.report``)."""
    return [line for g in torchkiln.report(compiled).graphs for line in g.convolutions]


def cuda_default_errors(net: type, shape: tuple[int, ...], dtype) -> tuple[object, float, float]:
    """``net()`` in eval mode on CUDA in ``dtype``, compiled with the default options, and its
    float64 copy: (the compiled model, its largest error against float64 on a fresh random
    input of ``shape``, eager's)."""
    torch.manual_seed(2)
    model = net().eval().cuda()
    reference = net().eval().cuda().double()
    reference.load_state_dict(model.state_dict())
    model = model.to(dtype)
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False})
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    with torch.no_grad():
        got, eager, exact = compiled(x), model(x), reference(x.double())
    err_got = (got.double() - exact).abs().max().item()
    return compiled, err_got, (eager.double() - exact).abs().max().item()


def assert_equals_eager_over_updates(model, compiled, shape: tuple[int, ...]) -> None:
    """Three calls on fresh random inputs of ``shape``, each equal to eager's; before the third
    every parameter is updated in place (what the compiled graph caches from a weight, its
    channels-last copy or its taps, must follow)."""
    for step in range(3):
        x = torch.randn(*shape)
        with torch.no_grad():
            if step == 2:
                for p in model.parameters():
                    p.mul_(0.9).add_(0.01)
            got, expected = compiled(x), model(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def assert_training_steps_equal_eager(
    model, compiled, shape: tuple[int, ...], autocast: bool, steps: int = 3
) -> None:
    """``steps`` training steps of ``compiled`` (``model`` compiled) against an eager copy of
    ``model`` taken first, on fresh random inputs of ``shape`` on the model's device, under
    bfloat16 autocast or not: the outputs and every parameter's gradient of ``mean(out ** 2)``
    equal eager's (bfloat16's tolerance under autocast), and every parameter takes an SGD step
    in place between steps, in both copies."""
    reference = copy.deepcopy(model)
    device = next(model.parameters()).device
    tol = {"rtol": 3e-2, "atol": 3e-2} if autocast else {"rtol": 1e-4, "atol": 1e-5}
    for _ in range(steps):
        x = torch.randn(*shape, device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            got, expected = compiled(x), reference(x)
        got.float().square().mean().backward()
        expected.float().square().mean().backward()
        torch.testing.assert_close(got, expected, **tol)
        with torch.no_grad():
            for (name, p), q in zip(model.named_parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
                p.sub_(0.1 * p.grad)
                q.sub_(0.1 * q.grad)
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
