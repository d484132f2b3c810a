"""CUDA graphs for mode="reduce-overhead": record a compiled graph once, replay it on each call.

A replay launches every kernel of the graph with one CPU call, which is what removes the Python
and launch overhead for small batches. The recording needs fixed addresses, so inputs are copied
into static buffers before each replay. Outputs are cloned after the replay, so a caller may keep
them across calls (torch.compile instead hands out the static outputs, overwritten on the next call;
the clone costs one copy per output and is the safe default).

Skipped (the compiled graph is returned unchanged, with the reason) when: inputs are not on CUDA,
shapes are symbolic (a graph would be needed per shape), autograd is recording, or the graph
mutates its inputs (a replay would not write the caller's tensors). The last two are recorded
graph by graph instead, inside aot-partition's runtime (cudagraph_steps.py).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)
_WARMUP_CALLS = 3


# operator.__iadd__ and friends: "__i" + the name of an existing binary operator.
_INPLACE_OPERATORS = {
    getattr(operator, n)
    for n in dir(operator)
    if n.startswith("__i") and hasattr(operator, "__" + n[3:])
}


# Ops whose result may share memory with their first argument: a mutation of such a result
# mutates the input it came from.
_VIEW_METHODS = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "transpose",
        "permute",
        "expand",
        "expand_as",
        "t",
        "select",
        "narrow",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "split",
        "chunk",
        "unbind",
        "as_strided",
        "diagonal",
        "movedim",
        "swapaxes",
        "swapdims",
        "contiguous",
        "detach",
        "unfold",
        "__getitem__",
        "to",
        "type_as",
        "real",
        "imag",
        "view_as_real",
        "view_as_complex",
        "mT",
        "T",
    }
)
_VIEW_FUNCTIONS = {operator.getitem} | {
    f for f in (getattr(torch, n, None) for n in _VIEW_METHODS) if callable(f)
}


def _is_inplace(node: torch.fx.Node) -> bool:
    """Does ``node`` write into its first argument (or an ``out=`` tensor)?"""
    if "out" in node.kwargs or node.kwargs.get("inplace") is True:
        return True
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("_")
    if node.op != "call_function":
        return False
    if node.target in _INPLACE_OPERATORS:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return schema.is_mutable
    # torch.relu_, torch.nn.functional.relu_ (not operator.and_ / or_, which are not in place)
    name = getattr(node.target, "__name__", "")
    module = getattr(node.target, "__module__", "") or ""
    return name.endswith("_") and not name.startswith("_") and module != "_operator"


def _mutates_inputs(gm: torch.fx.GraphModule) -> bool:
    """Does the graph write into a placeholder (or a view of one)? A replay would write the static
    copy, not the caller's tensor. In-place updates of the graph's own intermediates are fine."""
    aliases: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            aliases.add(node)
            continue
        first = node.args[0] if node.args else None
        if _is_inplace(node):
            targets = [first, node.kwargs.get("out")]
            if any(t in aliases for t in targets if isinstance(t, torch.fx.Node)):
                return True
            aliases_result = first in aliases
        else:
            is_view = (node.op == "call_method" and node.target in _VIEW_METHODS) or (
                node.op == "call_function" and node.target in _VIEW_FUNCTIONS
            )
            aliases_result = is_view and first in aliases
        if aliases_result:
            aliases.add(node)
    return False


def _is_dynamic(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    for value in example_inputs:
        if isinstance(value, torch.SymInt):
            return True
    for node in gm.graph.nodes:
        fake = node.meta.get("example_value")
        if isinstance(fake, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in fake.shape):
            return True
    return False


def skip_reason(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why this graph cannot run as a CUDA graph, or None when it can."""
    tensors = [v for v in example_inputs if isinstance(v, torch.Tensor)]
    if not tensors or any(t.device.type != "cuda" for t in tensors):
        return "inputs are not all on CUDA"
    if torch.is_grad_enabled() and any(t.requires_grad for t in [*tensors, *gm.parameters()]):
        return "autograd is recording (the backward graph is not recorded)"
    if _is_dynamic(gm, example_inputs):
        return "shapes are dynamic"
    if _mutates_inputs(gm):
        return "the graph mutates its inputs"
    return None


def wrap_cudagraphs(
    compiled: Callable[..., Any], gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> tuple[Callable[..., Any], str]:
    """``(callable, status)``: ``compiled`` recorded as a CUDA graph ("on"), or unchanged with the
    reason it was skipped. Recording happens on the first call (after warm-up on a side stream)."""
    reason = skip_reason(gm, example_inputs)
    if reason is not None:
        log.info("torchkiln: CUDA graphs skipped: %s", reason)
        return compiled, f"skipped: {reason}"
    return _CUDAGraphRunner(compiled), "on"


class _CUDAGraphRunner:
    def __init__(self, compiled: Callable[..., Any]) -> None:
        self.compiled = compiled
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: list[Any] = []
        self.static_outputs: Sequence[Any] = ()
        # aot-partition's inference runtime refolds frozen parameters' constants in place; a
        # replay skips the runtime, so the runner calls it before each replay (and recording)
        self.refresh: Callable[[], None] | None = getattr(compiled, "refresh_folded", None)

    def _record(self, args: Sequence[Any]) -> None:
        if self.refresh is not None:  # never refold inside the capture
            self.refresh()
        self.static_inputs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up allocations stay out of the recorded pool
            for _ in range(_WARMUP_CALLS):
                self.compiled(*self.static_inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_outputs = self.compiled(*self.static_inputs)
        self.graph = graph

    def __call__(self, *args: Any) -> list[Any]:
        if self.graph is None:
            self._record(args)
        for static, value in zip(self.static_inputs, args, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(value)
        if self.refresh is not None:  # folded constants of changed parameters, in place
            self.refresh()
        self.graph.replay()
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_outputs]
