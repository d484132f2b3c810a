"""Does eager's kernel exist for these dtypes? Asked of a real run on tiny tensors.

Meta functions (what fake tensors run) check shapes, not whether a kernel is compiled for a
dtype: ``long_tensor.softmax(0)`` raises NotImplementedError ("softmax_lastdim_kernel_impl" not
implemented for 'Long') in eager, and traced on fakes it gives a graph that computes an answer.
So, for a call with an integer, bool or half-precision tensor, or with tensors of two floating
dtypes (eager's CPU batch norm refuses float64 statistics for a float32 input; its meta function
does not), capture runs the op once on real tensors of the same dtypes and device, each dim cut
to at most 2 elements (an empty dim stays empty, as eager skips empty work). When that raises
NotImplementedError (the dispatch macros' "not implemented for <dtype>"), or a
RuntimeError/TypeError about dtypes ("std and var only support floating point and complex
dtypes"), the op is left to Python, which raises eager's own error. Any other exception from the
probe says nothing (an index valid for the real sizes may be out of range for the cut ones) and
is ignored.

The probe must have no effect a user could see. Its tensors are its own zeros, and every ATen op
it reaches runs under ``_EffectFree``, which stops the probe (no verdict) before an op that draws
random numbers (tagged ``nondeterministic_seeded``: ``F.gumbel_softmax`` and
``F.fractional_max_pool2d`` draw them in Python, under names no list would catch), writes a tensor
the probe did not make (one hidden in an object argument), talks to other processes (c10d) or is
not torch's own (a user's custom op may do anything). The generators' states are also restored
after it, for a kernel that would draw without that tag.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

#: dtypes whose kernels are not all compiled (floating float32/float64 and complex always are)
_PROBED_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
    }
)

#: names (methods and functions) that draw random numbers or act outside the tensors: not probed
_NOT_PROBED = (
    "rand",
    "normal",
    "bernoulli",
    "uniform",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "multinomial",
    "dropout",
    "random",
    "item",
    "tolist",
    "numpy",
    "print",
    "backward",
    "record_stream",
    "pin_memory",
    "share_memory",
    "set_",
    "resize",
    # factories sized by their arguments, not by a tensor (the probe could not cut them)
    "new_",
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "range",
    "linspace",
    "logspace",
    "eye",
)


#: words of an error about dtypes (eager's dispatch and dtype checks)
_ABOUT_DTYPES = re.compile(
    r"dtype|floating point|integral|scalar type|"
    r"\b(Long|Int|Short|Char|Byte|Bool|Half|BFloat16|UInt\d+)\b"
)


class _NoHint(Exception):
    """A symbolic size with no value to probe with (read from data)."""


def _concrete(v: Any) -> Any:
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = v.node.hint
        if hint is None:
            raise _NoHint
        return hint
    return v


def _probe_tensor(t: torch.Tensor) -> torch.Tensor:
    shape = [min(int(_concrete(s)), 2) for s in t.shape]
    return torch.zeros(shape, dtype=t.dtype, device=t.device)


def _name(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "") or ""


def _torchs_own(target: Any) -> bool:
    if isinstance(target, str):  # a Tensor method
        return True
    owner = getattr(target, "__objclass__", None)  # torch.Tensor.add and its kind
    if isinstance(owner, type) and issubclass(owner, torch._C.TensorBase):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in (
        "torch",
        "_operator",
        "operator",
        "math",
        "builtins",
    ) or isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def kernel_missing(kind: str, target: Any, args: list, kwargs: dict) -> str | None:
    """eager's NotImplementedError message when ``target(*args, **kwargs)`` (fake arguments) has no
    kernel for their dtypes, else None."""
    leaves = pytree.tree_leaves((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if not any(t.dtype in _PROBED_DTYPES for t in tensors) and not _mixed_floats(tensors):
        return None
    if not _torchs_own(target):
        return None  # a user's function allowed in the graph: running it could have effects
    name = _name(target).lower()
    if any(word in name for word in _NOT_PROBED) or any(t.device.type == "meta" for t in tensors):
        return None
    if (getattr(target, "__module__", None) or "").startswith("torch.distributed"):
        return None  # a collective run for real would wait for the other ranks
    key = _key(kind, target, leaves)
    if key is not None and key in _VERDICTS:
        return _VERDICTS[key]
    verdict = _probe(kind, target, args, kwargs)
    if key is not None:
        _VERDICTS[key] = verdict
    return verdict


def _mixed_floats(tensors: list[torch.Tensor]) -> bool:
    """Two floating dtypes among a call's tensors: where a kernel checks that its parameters
    match its input (batch norm on the CPU: "mixed dtype (CPU): expect parameter to have scalar
    type of Float" for a float32 input with float64 statistics), which meta functions do not."""
    return len({t.dtype for t in tensors if t.is_floating_point()}) > 1


#: (kind, target, the tensors' dtype/device/rank and the other arguments) -> verdict: one probe per
#: op signature (a bf16 model calls the same few ops hundreds of times)
_VERDICTS: dict[Any, str | None] = {}


def _key(kind: str, target: Any, leaves: list) -> Any:
    parts: list[Any] = [kind, target]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            try:  # the probe's own cut sizes (an empty dim stays empty: eager skips empty work)
                cut = tuple(min(int(_concrete(s)), 2) for s in x.shape)
            except _NoHint:
                return None
            parts.append((x.dtype, x.device.type, cut))
        elif isinstance(x, (int, float, bool, str, type(None), torch.dtype, torch.device)):
            parts.append(x)
        else:
            return None  # a symbolic value or an object: no stable key
    try:
        hash(tuple(parts))
    except TypeError:
        return None
    return tuple(parts)


class _Effect(Exception):
    """The probe reached an op with an effect outside its own tensors: it stops, with no verdict."""


#: op namespaces the probe may run: torch's own kernels (a custom op's may have any effect)
_OWN_NAMESPACES = frozenset({"aten", "prims"})


class _EffectFree(TorchDispatchMode):
    """Runs the probe's ATen ops, refusing (``_Effect``, before the op runs) one that draws random
    numbers, leaves torch's own namespaces (collectives are c10d ops) or writes a tensor whose
    storage the probe did not make (its zeros, and what its ops returned)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self.own = {StorageWeakRef(t.untyped_storage()) for t in tensors}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags:
            raise _Effect(f"{func} draws random numbers")
        if func.namespace not in _OWN_NAMESPACES:
            raise _Effect(f"{func} is not one of torch's own ops")
        schema = func._schema
        if schema.is_mutable:
            for i, a in enumerate(schema.arguments):
                if a.alias_info is None or not a.alias_info.is_write:
                    continue
                v = (
                    kwargs.get(a.name)
                    if a.kwarg_only
                    else (args[i] if i < len(args) else kwargs.get(a.name))
                )
                for t in pytree.tree_leaves(v):
                    if (
                        isinstance(t, torch.Tensor)
                        and StorageWeakRef(t.untyped_storage()) not in self.own
                    ):
                        raise _Effect(f"{func} writes a tensor the probe did not make")
        out = func(*args, **kwargs)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.own.add(StorageWeakRef(t.untyped_storage()))
        return out


class _KeptGenerators:
    """Restores the default generators' states (CPU, and each initialized CUDA device) on exit."""

    def __enter__(self):
        self.cpu = torch.random.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.cuda = torch.cuda.get_rng_state_all() if cuda else None
        return self

    def __exit__(self, *exc):
        if not torch.equal(torch.random.get_rng_state(), self.cpu):
            torch.random.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        return False


def _probe(kind: str, target: Any, args: list, kwargs: dict) -> str | None:
    made: list[torch.Tensor] = []

    def real(x):
        if isinstance(x, torch.Tensor):
            made.append(_probe_tensor(x))
            return made[-1]
        return _concrete(x)

    try:
        real_args, real_kwargs = pytree.tree_map(real, (args, kwargs))
    except _NoHint:
        return None
    try:
        with torch.no_grad(), warnings.catch_warnings(), _KeptGenerators(), _EffectFree(made):
            warnings.simplefilter("ignore")  # a resized out= tensor, a deprecation: not the user's
            if kind == "call_method":
                getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
            else:
                target(*real_args, **real_kwargs)
    except _Effect:
        return None  # not run: no verdict (the op goes in the graph, as for any untested call)
    except NotImplementedError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    except (RuntimeError, TypeError) as e:
        # only a complaint about the dtypes, which the cut sizes cannot have caused ("std and var
        # only support floating point and complex dtypes"); a shape error may be the cut's
        first = str(e).splitlines()[0] if str(e) else ""
        return f"{type(e).__name__}: {first}" if _ABOUT_DTYPES.search(first) else None
    except Exception:  # noqa: BLE001 - the cut sizes may make a valid call invalid: no verdict
        return None
    return None
