"""A user's ``torch.autograd.Function`` in a training step through the whole pipeline: capture
makes ``apply`` one graph node (``variables/autograd_function.py``), aot-partition's joint trace
runs ``forward`` and the user's ``backward`` on its tracing tensors, loop-ir compiles both
graphs. One graph, no fallback, and the parameters' gradients equal eager's on fresh inputs: the
user's backward (a straight-through estimator, which differs from forward's derivative), not
autograd's of forward."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from codegens import CODEGENS


class RoundSTE(torch.autograd.Function):
    """Rounding with a straight-through gradient, scaled: forward's derivative is 0."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.5, None


class SiLUSaved(torch.autograd.Function):
    """New style, saving its input: the backward is silu's derivative written by hand."""

    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s + x * s * (1 - s))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = SiLUSaved.apply(self.a(x))
        return self.b(RoundSTE.apply(h, 4.0)).relu().sum(-1)


@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("codegen", CODEGENS)
def test_a_custom_function_trains_in_one_graph(codegen):
    torch.manual_seed(0)
    eager = Net()
    ours = copy.deepcopy(eager)
    compiled = torchkiln.compile(ours, options={"strict": True, "codegen": codegen})
    for _ in range(2):
        x = torch.randn(6, 16)
        out, expected = compiled(x), eager(x)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        ours.zero_grad()
        eager.zero_grad()
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks, report
    assert not report.eager_fallbacks, report


#: rebound by the test below: a backward reading it has its value baked into the compiled
#: backward graph, so capture guards it
CLIP = 0.25


class SqrtClipped(torch.autograd.Function):
    """Recurrent Gemma's ``SqrtBoundDerivative``: the gradient of a square root, its input
    clipped below at a module-level number the backward reads."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sqrt(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / torch.sqrt(torch.clip(4.0 * x, min=CLIP))


@pytest.mark.usefixtures("private_cache_dir")
def test_a_backward_reading_a_global_number_compiles_with_a_guard_on_it():
    global CLIP
    model = torch.nn.Linear(8, 8)

    def step(x):
        return SqrtClipped.apply(model(x).square()).sum()

    compiled = torchkiln.compile(step, options={"strict": True})
    try:
        for clip in (0.25, 9.0, 0.25):
            CLIP = clip
            x = torch.randn(5, 8)
            compiled(x).backward()
            ours = model.weight.grad.clone()
            model.zero_grad()
            step(x).backward()
            torch.testing.assert_close(ours, model.weight.grad, msg=f"CLIP {clip}")
            model.zero_grad()
    finally:
        CLIP = 0.25
    report = torchkiln.report(compiled)
    # one graph per value of CLIP, each with the Function's node; none fell back
    assert report.num_graphs == 2 and not report.graph_breaks, report
    assert not report.eager_fallbacks, report


class Cumulation(torch.autograd.Function):
    """YOSO's ``YosoCumulation``: a dict of numbers passed to ``apply``, kept on ctx and read
    again by the backward (here a key forward never reads, too)."""

    @staticmethod
    def forward(ctx, q, k, config):
        cos = torch.matmul(q, k.transpose(-1, -2)).clamp(-0.99, 0.99)
        e = (1 - torch.acos(cos) / 3.141592653589793) ** config["hash_code_len"]
        ctx.save_for_backward(e, q, k)
        ctx.config = config
        return e.sum(-1)

    @staticmethod
    def backward(ctx, grad):
        e, q, k = ctx.saved_tensors
        n = ctx.config["hash_code_len"] * ctx.config["scale"]
        g = grad[..., None] * e
        return torch.matmul(g, k) * (n / 2), torch.matmul(g.transpose(-1, -2), q) * (n / 2), None


CONFIG = {"hash_code_len": 3, "scale": 2.0}


@pytest.mark.usefixtures("private_cache_dir")
def test_a_dict_of_numbers_passed_to_apply_is_an_argument_of_its_node():
    def attend(q, k):
        return Cumulation.apply(q * 1, k * 1, CONFIG)

    compiled = torchkiln.compile(attend, options={"strict": True})
    try:
        # "scale" only the backward reads: changing it compiles again all the same
        for key, value in ((None, None), ("scale", 5.0), ("hash_code_len", 2)):
            if key is not None:
                CONFIG[key] = value
            q = torch.randn(2, 4, 8, requires_grad=True)
            k = torch.randn(2, 4, 8, requires_grad=True)
            out = compiled(q, k)
            out.sum().backward()
            ours = (q.grad, k.grad)
            q.grad = k.grad = None
            expected = attend(q, k)
            expected.sum().backward()
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(ours, (q.grad, k.grad), msg=f"after {key} = {value}")
    finally:
        CONFIG.update({"hash_code_len": 3, "scale": 2.0})
    report = torchkiln.report(compiled)
    assert report.num_graphs == 3 and not report.graph_breaks, report
    assert not report.eager_fallbacks, report
