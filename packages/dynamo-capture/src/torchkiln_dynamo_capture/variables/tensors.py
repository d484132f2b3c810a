"""Tensors: a FakeTensor for metadata plus the FX node that computes the value."""

from __future__ import annotations

import operator

import torch
import torch.fx

try:
    import numpy as np
except ImportError:  # optional: without numpy, Tensor.numpy() breaks the graph like .tolist()
    np = None

from ..exc import Unsupported
from .base import AttrMissing, BoundMethodVariable, ConstantVariable, VariableTracker
from .containers import DictVariable, ListVariable, TupleVariable
from .symbolic import scalar_output, sizes_variable, sym_value

# attributes answered from the FakeTensor's metadata (static shapes: they become constants)
_META_ATTRS = {
    "shape",
    "dtype",
    "device",
    "ndim",
    "requires_grad",
    "is_cuda",
    "is_cpu",
    "layout",
    "is_sparse",
    "is_quantized",
    "is_meta",
    "is_leaf",
    "is_mps",
    "is_nested",
    "itemsize",
    "nbytes",
}
# attributes that are tensors themselves: a getattr node
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "real", "imag", "data"}
# methods answered from metadata
_META_METHODS = {
    "size",
    "dim",
    "stride",
    "numel",
    "nelement",
    "is_floating_point",
    "is_complex",
    "is_contiguous",
    "element_size",
    "get_device",
    "ndimension",
    "storage_offset",
    "is_signed",
    "has_names",
}
#: a backward pass fills the leaves' .grad and frees the graph's saved values: outside any graph
#: (a call_method node returning None was dropped as dead code, and .grad stayed None)
BACKWARD_INSIDE = (
    "a backward pass (Tensor.backward, torch.autograd.backward) inside a captured function"
)
BACKWARD_HINT = "it runs in Python between two graphs, as in eager"
_DATA_DEPENDENT = {
    "item",
    "tolist",
    "numpy",
    "data_ptr",
    "__bool__",
    "__int__",
    "__float__",
    "nonzero",
    "unique",
}


class TensorVariable(VariableTracker):
    """A tensor in the graph under construction. ``node`` produces it; ``fake`` holds its metadata."""

    def __init__(
        self, node: torch.fx.Node, fake: torch.Tensor, source=None, cls: type = torch.Tensor
    ):
        self.node = node
        self.fake = fake
        self.source = source
        self.cls = cls

    def python_type(self) -> type:
        return self.cls

    def _symbolic(self) -> bool:
        return any(isinstance(s, torch.SymInt) for s in self.fake.shape)

    def var_getattr(self, tx, name):
        if name == "shape" and self._symbolic():
            return sizes_variable(tx, self, self.fake.shape, "size")
        if name in _META_ATTRS:
            return ConstantVariable(getattr(self.fake, name))
        if name in _TENSOR_ATTRS:
            return tx.out.call_tensor_op(
                tx, "call_function", getattr, [self, ConstantVariable(name)], {}
            )
        if name == "grad":
            raise Unsupported("reading Tensor.grad inside a captured function")
        if name in _DATA_DEPENDENT:
            # fails when called (at the call, where the frame can be split), not when looked up
            return BoundMethodVariable(self, name)
        if callable(getattr(torch.Tensor, name, None)):
            return BoundMethodVariable(self, name)
        if not hasattr(torch.Tensor, name):
            raise AttrMissing(name)
        raise Unsupported(f"Tensor attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if name == "backward":
            raise Unsupported(BACKWARD_INSIDE, BACKWARD_HINT)
        if name == "requires_grad_":
            # which tensors autograd tracks is no value a graph computes: as a node it made the
            # ATen trace fail, and the whole graph ran eagerly (MRA's zeros_like(q).requires_grad_())
            raise Unsupported("Tensor.requires_grad_() inside a captured function", BACKWARD_HINT)
        if name in ("item", "tolist") and tx.out.scalar_outputs and not args and not kwargs:
            return self._scalar_outputs(tx, name)
        if name == "numpy" and np is not None and not args and set(kwargs) <= {"force"}:
            # traced as numpy code (variables/numpy_arrays.py), as TorchDynamo does
            t = self
            if "force" in kwargs and kwargs["force"].as_python_constant():
                t = tx.out.call_tensor_op(tx, "call_method", "detach", [t], {})
                t = (
                    tx.out.call_tensor_op(tx, "call_method", "cpu", [t], {})
                    if t.fake.device.type != "cpu"
                    else t
                )
            return tx.call_value(np.asarray, [t], {})
        if name in _DATA_DEPENDENT:
            raise Unsupported(
                f"Tensor.{name}() (its result depends on tensor data)",
                "keep it outside the captured function",
            )
        if name in ("size", "numel", "nelement", "stride") and self._symbolic():
            return self._symbolic_meta(tx, name, args)
        if name in _META_METHODS:
            a = [x.as_python_constant() for x in args]
            k = {n: v.as_python_constant() for n, v in kwargs.items()}
            return tx.wrap(getattr(self.fake, name)(*a, **k), None)
        if name == "__getitem__":
            return tx.out.call_tensor_op(
                tx, "call_function", operator.getitem, [self, *args], kwargs
            )
        if name == "__setitem__":
            return tx.out.call_tensor_op(
                tx, "call_function", operator.setitem, [self, *args], kwargs
            )
        return tx.out.call_tensor_op(tx, "call_method", name, [self, *args], kwargs)

    def _scalar_outputs(self, tx, name):
        """``item()`` / ``tolist()`` as unbacked symbolic values (capture_scalar_outputs)."""
        if name == "item":
            return scalar_output(tx, self)
        if self._symbolic():
            raise Unsupported(
                "Tensor.tolist() of a tensor with symbolic sizes (its length is not known)"
            )

        def build(var, dims):
            if not dims:
                return scalar_output(tx, var)
            return ListVariable(
                [
                    build(
                        tx.out.call_tensor_op(
                            tx, "call_function", operator.getitem, [var, ConstantVariable(i)], {}
                        ),
                        dims[1:],
                    )
                    for i in range(dims[0])
                ]
            )

        return build(self, [int(d) for d in self.fake.shape])

    def _symbolic_meta(self, tx, name, args):
        """``size()``, ``size(d)``, ``numel()``, ``stride()`` of a tensor with symbolic sizes."""
        if name == "stride":
            values = self.fake.stride()
            return (
                sizes_variable(tx, self, values, "stride")
                if not args
                else ConstantVariable(int(values[args[0].as_python_constant()]))
            )
        if name in ("numel", "nelement"):
            return sym_value(
                tx,
                lambda: tx.out.graph.call_function(torch.ops.aten.sym_numel.default, (self.node,)),
                self.fake.numel(),
            )
        if not args:
            return sizes_variable(tx, self, self.fake.shape, "size")
        d = args[0].as_python_constant()
        return sym_value(
            tx,
            lambda: tx.out.graph.call_function(torch.ops.aten.sym_size.int, (self.node, d)),
            self.fake.shape[d],
        )

    def unpack(self, tx):
        n = int(self.fake.shape[0]) if self.fake.dim() else None  # iterating specializes the size
        if n is None:
            raise Unsupported("iterating over a 0-d tensor")
        return [
            tx.out.call_tensor_op(
                tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {}
            )
            for i in range(n)
        ]

    def truth(self, tx):
        raise Unsupported(
            "branching on a tensor's value (data-dependent control flow)",
            "use torch.where, or move the branch outside the captured function",
        )

    def __repr__(self) -> str:
        return f"TensorVariable({self.node.name}, {tuple(self.fake.shape)})"


def has_tensor(vts) -> bool:
    """Whether any of ``vts`` is a tensor, or a list, tuple or dict holding one at any depth."""
    for v in vts:
        if isinstance(v, TensorVariable):
            return True
        if isinstance(v, (ListVariable, TupleVariable)) and has_tensor(v.items):
            return True
        if isinstance(v, DictVariable) and has_tensor(v.items.values()):
            return True
    return False
