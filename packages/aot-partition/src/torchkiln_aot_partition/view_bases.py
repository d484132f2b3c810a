"""Hidden outputs for views of an intermediate the graph does not return.

``t = x * 2; return t[1:], t[:-1]``: in eager both outputs are views of ``t`` (``_base`` is
``t``), so a write through one is seen through the other. A compiled graph returns fresh,
unrelated tensors for them. As AOTAutograd does, the graph is made to return ``t`` as well, as an
extra output the caller never sees; the runtime then rebuilds the views from it with eager's
geometry (mutation.restore_aliases: as_strided over that output) and drops it from what it
returns. With autograd the gradient of the views flows back through as_strided into that output.

Only groups of two or more outputs on one intermediate's storage, none of which holds the whole
storage, need this (a view returned with its base is rebuilt from the base; a lone view shares
nothing with anything the caller sees, so a fresh tensor is as good). The intermediate is the
node that created the storage, found by one run on fake tensors; when it does not hold the whole
storage either, nothing is added and mutation.find_output_aliases refuses the graph as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .mutation import holds_whole_storage
from .trace import _as_output_tuple


class _FakeRun(fx.Interpreter):
    """Runs the graph on fake tensors and keeps every node's value; the module's own tensors
    (get_attr) are faked too, so real parameters never meet fake inputs."""

    def __init__(self, gm: fx.GraphModule, mode: Any) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.mode = mode

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        return self.mode.from_tensor(value) if isinstance(value, torch.Tensor) else value


def _node_values(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict[fx.Node, Any] | None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        with FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True) as mode, torch.no_grad():
            fakes = [
                mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in example_inputs
            ]
            run = _FakeRun(gm, mode)
            run.run(*fakes)
    except Exception:  # noqa: BLE001 - best effort: the ATen trace reports real problems better
        return None
    return run.env


def view_bases_to_expose(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[fx.Node]:
    """The nodes whose value is an intermediate that two or more outputs are views of while no
    output holds its whole storage (in output order, each once)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    output = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if output is None:
        return []
    outs = [o for o in _as_output_tuple(output.args[0]) if isinstance(o, fx.Node)]
    if not outs:
        return []
    values = _node_values(gm, example_inputs)
    if values is None:
        return []
    input_storages = set()
    creator: dict[Any, fx.Node] = {}
    for node in gm.graph.nodes:
        value = values.get(node)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            continue
        ref = StorageWeakRef(value.untyped_storage())
        if node.op in ("placeholder", "get_attr"):
            input_storages.add(ref)
        creator.setdefault(ref, node)
    groups: dict[Any, list[torch.Tensor]] = {}
    for node in outs:
        value = values.get(node)
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            continue
        if statically_known_true(value.numel() == 0):
            continue  # no element, nothing shared
        ref = StorageWeakRef(value.untyped_storage())
        if ref not in input_storages:
            groups.setdefault(ref, []).append(value)
    exposed = []
    for ref, tensors in groups.items():
        if len({id(t) for t in tensors}) < 2 or any(holds_whole_storage(t) for t in tensors):
            continue
        base = creator.get(ref)
        if base is not None and holds_whole_storage(values[base]) and base not in exposed:
            exposed.append(base)
    return exposed


def expose_view_bases(
    gm: fx.GraphModule, example_inputs: Sequence[Any]
) -> tuple[fx.GraphModule, int]:
    """``gm`` itself and 0 when no output needs a hidden base; else a copy of ``gm`` that also
    returns those bases after its own outputs, and how many it added."""
    if type(gm.graph._codegen) is not fx.graph.CodeGen:
        return gm, 0  # outputs flattened by a pytree codegen: their order is not ours to extend
    bases = view_bases_to_expose(gm, example_inputs)
    if not bases:
        return gm, 0
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    returned = graph.graph_copy(gm.graph, env)
    graph.output((*_as_output_tuple(returned), *(env[b] for b in bases)))
    exposed = fx.GraphModule(gm, graph)
    exposed.meta.update(gm.meta)
    return exposed, len(bases)
