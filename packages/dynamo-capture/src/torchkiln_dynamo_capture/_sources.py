"""Sources of values capture met: torchkiln_guards' sources, plus objects capture holds by reference.

Guards print sources as ``L['x'].w``; the generated ``run`` function needs them as code over its own
namespace instead, which ``source_code`` writes.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

import torch
from torchkiln_guards import (
    AttrSource,
    ClosureSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    Source,
)

from ._codegen import Namespace

__all__ = [
    "AttrSource",
    "ClosureSource",
    "GlobalSource",
    "HeldObjectSource",
    "ItemSource",
    "LocalSource",
    "Source",
    "TensorOfArraySource",
    "ViewDictSource",
    "WeakRefSource",
    "closure_cell_source",
    "module_global_source",
    "default_source",
    "source_code",
    "view_dict",
]

_LITERAL_KEYS = (int, str, bool, type(None))


@dataclass(frozen=True)
class HeldObjectSource(Source):
    """An object capture holds by reference (a submodule under a guarded root, another module's
    globals dict, the ``self`` of a captured bound method): a root torchkiln_guards has no kind for.

    Follows torchkiln_guards' Source protocol (``expr``, ``_code``, ``_fetch``); compares by identity.
    """

    obj: Any = field(compare=False, repr=False)
    label: str = field(compare=False)
    obj_id: int = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "obj_id", id(self.obj))

    def expr(self) -> str:
        return self.label

    def _code(self, base_ref, ctx):
        return ctx.const(self.obj, "held")

    def _fetch(self, base_value, frame):
        return self.obj


def view_dict(view) -> dict:
    """The dict behind a dict view (``d.keys()``, ``.values()``, ``.items()``). Python offers only a
    read-only proxy (``view.mapping``); the view's one referent is the dict itself."""
    (d,) = gc.get_referents(view)
    return d


@dataclass(frozen=True)
class ViewDictSource(Source):
    """The dict a dict view at ``source`` reads: ``<source>.<dict>``."""

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"{self.source.expr()}.<dict>"

    def _code(self, base_ref, ctx):
        return f"{ctx.const(view_dict, 'view_dict')}({base_ref})"

    def _fetch(self, base_value, frame):
        return view_dict(base_value)


def _tensor_of_array(array):
    return torch.from_numpy(array)


@dataclass(frozen=True)
class TensorOfArraySource(Source):
    """The tensor sharing the memory of the numpy array at ``source`` (``torch.from_numpy``): how
    an ndarray argument enters the graph (variables/numpy_arrays.py)."""

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"torch.from_numpy({self.source.expr()})"

    def _code(self, base_ref, ctx):
        return f"{ctx.const(_tensor_of_array, 'from_numpy')}({base_ref})"

    def _fetch(self, base_value, frame):
        return _tensor_of_array(base_value)


@dataclass(frozen=True)
class WeakRefSource(Source):
    """The object the weak reference at ``source`` refers to (None once it is gone):
    ``<source>()``. How an LSTM's forward reaches its weights (``_flat_weight_refs``)."""

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"{self.source.expr()}()"

    def _code(self, base_ref, ctx):
        return f"{base_ref}()"

    def _fetch(self, base_value, frame):
        return base_value()


def closure_cell_source(fn_source: Source, index: int) -> Source:
    """The contents of cell ``index`` of the function at ``fn_source``."""
    return AttrSource(ItemSource(AttrSource(fn_source, "__closure__"), index), "cell_contents")


def default_source(fn_source: Source, index: int) -> Source:
    """Positional default ``index`` of the function at ``fn_source``."""
    return ItemSource(AttrSource(fn_source, "__defaults__"), index)


def module_global_source(f_globals: dict, name: str) -> Source:
    """The global ``name`` of a module other than the captured frame's (an inlined function's,
    a custom Function's backward's): an item of its ``__dict__``, held by reference."""
    return ItemSource(
        HeldObjectSource(f_globals, f"{f_globals.get('__name__', '?')}.__dict__"), name
    )


def source_code(src: Source, ns: Namespace) -> str:
    """Python code reading ``src`` inside a generated ``run`` function (user parameters, ``_G`` the
    globals, ``_cells`` the closure cells by name; other objects bound through ``ns``)."""
    if isinstance(src, LocalSource):
        return src.name
    if isinstance(src, GlobalSource):
        return f"_G[{src.name!r}]"
    if isinstance(src, ClosureSource):
        return f"_cells[{src.name!r}].cell_contents"
    if isinstance(src, HeldObjectSource):
        return ns.ref(src.obj, "held")
    if isinstance(src, AttrSource):
        base = source_code(src.source, ns)
        if src.attr.isidentifier() and not src.attr.startswith("__"):
            return f"{base}.{src.attr}"
        return f"getattr({base}, {src.attr!r})"
    if isinstance(src, ViewDictSource):
        return f"{ns.ref(view_dict, 'view_dict')}({source_code(src.source, ns)})"
    if isinstance(src, TensorOfArraySource):
        return f"{ns.ref(_tensor_of_array, 'from_numpy')}({source_code(src.source, ns)})"
    if isinstance(src, WeakRefSource):
        return f"{source_code(src.source, ns)}()"
    if isinstance(src, ItemSource):
        key = repr(src.key) if type(src.key) in _LITERAL_KEYS else ns.ref(src.key, "key")
        return f"{source_code(src.source, ns)}[{key}]"
    raise NotImplementedError(f"no run-function code for source {type(src).__name__}")
