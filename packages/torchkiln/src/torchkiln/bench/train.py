"""Training mode of the benchmark (``--train``): one step = forward, a scalar loss, backward and an
eager ``torch.optim.AdamW`` step, for eager, torchkiln and torch.compile on the same model.

On CUDA with ``--dtype bfloat16``/``float16`` the parameters stay float32 and the forward runs
under ``torch.autocast`` of that dtype (mixed precision, as people train); with float32 there is
no autocast. Dropout is set to 0 so that the three variants compute the same step. The loss is
the mean square of every floating output (a scalar that reaches every output).

Saved-activation bytes (``Row.saved_bytes``): what torchkiln's forward graphs save for the
backward beyond parameters and inputs, aot-partition's min-cut figure; eager's
(``Row.eager_saved_bytes``) is measured with autograd's saved-tensor hooks over one forward.

Accuracy is checked once per model, on gradients: each variant takes one step from the same
weights and the same inputs, and every parameter's gradient of torchkiln must be within the
benchmark's rule (``accuracy.compare``) of eager's against an fp64 eager reference.
Each variant then owns its copy of the model and its optimizer for the timed steps.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torchkiln_aot_partition import saved_tensor_bytes

import torchkiln
from torchkiln.bench import accuracy, timing
from torchkiln.bench._peer import peer_compile
from torchkiln.bench.record import DTYPES, BenchConfig, Row, cast_to, record_report, record_timings
from torchkiln.bench.suites import ModelSpec
from torchkiln.cudagraph_steps import OBSERVED_CALLS
from torchkiln.options import MODE_SETTINGS
from torchkiln.pipeline import one_line

LOW_PRECISION = (torch.bfloat16, torch.float16)


def loss_of(output: Any) -> torch.Tensor:
    """The mean square of every floating output tensor, summed: a scalar reaching every output."""
    tensors = [t for t in accuracy.flatten_outputs(output) if t.is_floating_point()]
    if not tensors:
        raise ValueError("the model returns no floating-point tensor to train on")
    return sum(t.float().pow(2).mean() for t in tensors)


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if hasattr(module, "dropout") and isinstance(module.dropout, float):
            module.dropout = 0.0
    config = getattr(model, "config", None)
    for name in (
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "dropout",
        "attention_dropout",
        "resid_pdrop",
        "embd_pdrop",
        "attn_pdrop",
        "dropout_rate",
    ):
        if config is not None and isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)
    return model


class Variant:
    """One model copy, its optimizer and its (possibly compiled) callable."""

    def __init__(self, model: torch.nn.Module, fn: Callable[..., Any], autocast: Callable[[], Any]):
        self.model = model
        self.fn = fn
        self.autocast = autocast
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def forward_backward(self, inputs: tuple[Any, ...]) -> torch.Tensor:
        self.model.zero_grad(set_to_none=True)
        with self.autocast():
            loss = loss_of(self.fn(*inputs))
        loss.backward()
        return loss

    def step(self, inputs: tuple[Any, ...]) -> torch.Tensor:
        loss = self.forward_backward(inputs)
        self.optimizer.step()
        return loss

    def grads(self) -> list[torch.Tensor]:
        return [
            p.grad if p.grad is not None else torch.zeros_like(p) for p in self.model.parameters()
        ]


def eager_saved_bytes(variant: Variant, inputs: tuple[Any, ...]) -> int:
    """Bytes eager's forward of the model (not the loss, which both run eagerly) saves for its
    backward beyond the parameters, buffers and inputs (autograd's saved-tensor hooks)."""
    model = variant.model
    held = [*model.parameters(), *model.buffers(), *inputs]
    with variant.autocast():
        out, saved = saved_tensor_bytes(variant.fn, *inputs, held=held)
    del out  # frees the graph and what it saved
    return saved.activations


def run_train(
    spec: ModelSpec, config: BenchConfig, row: Row, status: Callable[[str], None]
) -> None:
    """Fill ``row`` with the training-step figures of ``spec`` (see the module docstring)."""
    dtype = DTYPES[config.dtype]
    device = config.device
    status(f"{spec.name}: building")
    base, inputs = spec.build(row.batch)
    base = _no_dropout(base).train()
    model64, inputs64 = accuracy.fp64_copy(base, inputs)
    model64 = model64.to(device)
    inputs64 = tuple(cast_to(v, device, torch.float64) for v in inputs64)
    mixed = dtype in LOW_PRECISION  # parameters in float32, the forward under autocast
    param_dtype = torch.float32 if mixed else dtype
    base = base.to(device=device, dtype=param_dtype)
    inputs = tuple(cast_to(v, device, param_dtype) for v in inputs)

    def autocast() -> Any:
        if mixed:
            return torch.autocast(torch.device(device).type, dtype=dtype)
        return contextlib.nullcontext()

    timer = timing.Timer(device)
    # the fp64 reference gradients
    reference = Variant(model64, model64, contextlib.nullcontext)
    reference.forward_backward(inputs64)
    ref_grads = [g.detach() for g in reference.grads()]
    del reference, model64, inputs64

    eager = Variant(copy.deepcopy(base), None, autocast)  # type: ignore[arg-type]
    eager.fn = eager.model
    first_eager_s, _ = timer.wall(lambda: eager.forward_backward(inputs))
    eager_s = min(first_eager_s, timer.wall(lambda: eager.forward_backward(inputs))[0])
    eager_grads = [g.detach().clone() for g in eager.grads()]
    row.eager_saved_bytes = eager_saved_bytes(eager, inputs)

    status(f"{spec.name}: compiling a training step with torchkiln")
    tk_model = copy.deepcopy(base)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torchkiln.compile(tk_model, mode=config.mode, options=config.torchkiln_options())
        tk = Variant(tk_model, compiled, autocast)
        first_s, _ = timer.wall(lambda: tk.forward_backward(inputs))
    row.notes += sorted({str(w.message) for w in caught if "torchkiln" in str(w.message)})
    row.compile_s = timing.compile_seconds(first_s, eager_s)
    verdict = accuracy.compare(tk.grads(), eager_grads, ref_grads, dtype)
    if verdict.passed and MODE_SETTINGS.get(config.mode, {}).get("cudagraphs"):
        # a step's CUDA graphs record after observed calls (cudagraph_steps.py): the first
        # step ran without them, so the gradients of a replayed step are checked too
        for _ in range(OBSERVED_CALLS + 1):
            tk.forward_backward(inputs)
        verdict = accuracy.compare(tk.grads(), eager_grads, ref_grads, dtype)
        if not verdict.passed:
            verdict = dataclasses.replace(verdict, detail=f"after replays: {verdict.detail}")
    row.accuracy = verdict.text
    if not verdict.passed:
        row.notes.append(f"gradients: {verdict.detail}")
    record_report(row, torchkiln.report(compiled))
    if row.op_fallbacks_fw or row.op_fallbacks_bw:
        row.notes.append(
            "ATen fallbacks: forward "
            + (", ".join(row.op_fallbacks_fw) or "none")
            + "; backward "
            + (", ".join(row.op_fallbacks_bw) or "none")
        )
    variants = {"eager": eager, "torchkiln": tk}

    if config.peer:
        status(f"{spec.name}: compiling a training step with torch.compile")
        try:
            pc_model = copy.deepcopy(base)
            peer = Variant(pc_model, peer_compile(pc_model, mode=config.mode), autocast)
            peer_first_s, _ = timer.wall(lambda: peer.forward_backward(inputs))
            row.inductor_compile_s = timing.compile_seconds(peer_first_s, eager_s)
            row.inductor_accuracy = accuracy.compare(
                peer.grads(), eager_grads, ref_grads, dtype
            ).text
            variants["inductor"] = peer
        except Exception as error:  # noqa: BLE001 - the peer failing is a note, not our failure
            row.notes.append(f"torch.compile failed: {one_line(error, 160)}")

    status(f"{spec.name}: timing training steps ({config.repeat} interleaved runs)")
    fns = {name: (lambda v=v: v.step(inputs)) for name, v in variants.items()}
    record_timings(row, fns, config, timer)
