"""Graph splitting at DistributedDataParallel's gradient buckets (the "DDPOptimizer").

One compiled graph has one backward: every parameter's gradient is ready only when all of it has
run, so DDP's all-reduce of each bucket starts after the whole backward. Split into pieces of
about one bucket of parameters each, the backward runs piece by piece (last piece first), and
the bucket of a finished piece is reduced while the backward of the pieces before it computes.

Buckets are filled as DDP fills them: parameters in reverse order of use (the order their
gradients become ready), a new bucket when ``bucket_bytes_cap`` is reached. Each piece goes
through the backend on its own at its first call (the real inputs, with their requires_grad).
"""

from __future__ import annotations

import inspect
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx.passes.split_module import split_module


@dataclass(frozen=True)
class BucketSplit:
    """How one captured graph was split: parameter count and bytes of each piece, in run order."""

    bucket_bytes_cap: int
    pieces: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        sizes = ", ".join(f"{n} params/{_size(b)}" for n, b in self.pieces)
        cap = _size(self.bucket_bytes_cap)
        return f"split at DDP buckets of {cap} into {len(self.pieces)} pieces: {sizes}"


def _size(nbytes: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def active_bucket_cap() -> int | None:
    """The bucket size of the DistributedDataParallel whose forward is running (None: none is).
    DDP marks itself active around its wrapped module's call (``_inside_ddp_forward``)."""
    ddp_mod = sys.modules.get("torch.nn.parallel.distributed")
    ddp_cls = getattr(ddp_mod, "DistributedDataParallel", None)
    active = getattr(ddp_cls, "_active_ddp_module", None) if ddp_cls is not None else None
    if active is None:
        return None
    cap = getattr(active, "bucket_bytes_cap", None)
    return int(cap) if isinstance(cap, int) and cap > 0 else None


def _trainable(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.Tensor | None:
    if node.op != "get_attr":
        return None
    try:
        value = _attr(gm, str(node.target))
    except AttributeError:
        return None
    return value if isinstance(value, torch.Tensor) and value.requires_grad else None


def _attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def bucket_pieces(
    gm: torch.fx.GraphModule, bucket_bytes_cap: int
) -> dict[torch.fx.Node, int] | None:
    """Piece index (in run order) of every node, or None when the graph holds one bucket or less.

    Walking backward from the output, a node joins the current piece; a piece is closed once the
    trainable parameters read in it reach the cap. Placeholders belong to the first piece."""
    nodes = list(gm.graph.nodes)
    owner: dict[torch.fx.Node, int] = {}
    piece, filled = 0, 0
    seen: set[int] = set()
    for node in reversed(nodes):
        if node.op in ("placeholder", "output"):
            continue
        if filled >= bucket_bytes_cap:
            piece, filled = piece + 1, 0
        owner[node] = piece
        param = _trainable(gm, node)
        if param is not None and id(param) not in seen:
            seen.add(id(param))
            filled += param.numel() * param.element_size()
    if piece == 0:
        return None
    in_order = {n: piece - p for n, p in owner.items()}
    # a parameter belongs to the piece that first uses it (its gradient is complete when that
    # piece's backward, the last to run among its users, is done)
    for node in nodes:
        users = [in_order[u] for u in node.users if u in in_order]
        if node.op == "get_attr" and users:
            in_order[node] = min(users)
    return in_order


class _LazyPiece(torch.nn.Module):
    """One piece: handed to the backend at its first call, then the compiled callable runs."""

    def __init__(self, piece: torch.fx.GraphModule, backend: Callable[..., Any]) -> None:
        super().__init__()
        self.piece = piece
        self.__dict__["_backend"] = backend
        self.__dict__["_compiled"] = None

    def forward(self, *args: Any) -> Any:
        compiled = self.__dict__["_compiled"]
        if compiled is None:
            compiled = self.__dict__["_backend"](self.piece, list(args))
            self.__dict__["_compiled"] = compiled
        return compiled(*args)


def split_at_buckets(
    gm: torch.fx.GraphModule, bucket_bytes_cap: int, backend: Callable[..., Any]
) -> tuple[Callable[..., Any], BucketSplit] | None:
    """``gm`` as pieces of about one DDP bucket each, every piece compiled by ``backend`` at its
    first call; None when ``gm`` fits in one bucket (compile it whole)."""
    owner = bucket_pieces(gm, bucket_bytes_cap)
    if owner is None:
        return None
    if "tuple_return" in inspect.signature(split_module).parameters:
        split = split_module(
            gm, gm, lambda node: owner[node], keep_original_order=True, tuple_return=True
        )
    else:  # torch < 2.12: pieces with one output return it bare
        split = _tuple_outputs(
            split_module(gm, gm, lambda node: owner[node], keep_original_order=True)
        )
    sizes: dict[int, dict[int, torch.Tensor]] = {}
    for node, piece in owner.items():
        param = _trainable(gm, node)
        if param is not None:
            sizes.setdefault(piece, {})[id(param)] = param
    for name, piece in list(split.named_children()):
        setattr(split, name, _LazyPiece(piece, backend))
    pieces = tuple(
        (len(ps), sum(p.numel() * p.element_size() for p in ps.values()))
        for _, ps in sorted(sizes.items())
    )
    return split, BucketSplit(bucket_bytes_cap, pieces)


def _tuple_outputs(split: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Every piece of ``split`` returns a tuple (a bare output becomes ``(x,)``, read back with
    ``[0]`` by the caller), as ``split_module(tuple_return=True)`` gives on newer torch: a piece is
    compiled as a graph, and compiled graphs return a sequence."""
    for node in list(split.graph.nodes):
        if node.op != "call_module":
            continue
        piece = getattr(split, node.target)
        out = next(n for n in piece.graph.nodes if n.op == "output")
        if isinstance(out.args[0], (tuple, list)):
            continue
        out.args = ((out.args[0],),)
        piece.recompile()
        with split.graph.inserting_after(node):
            first = split.graph.call_function(operator.getitem, (node, 0))
        node.replace_all_uses_with(
            first, delete_user_cb=lambda user, first=first: user is not first
        )
    split.recompile()
    return split
