"""Binding call arguments to a code object's parameters, as CPython does."""

from __future__ import annotations

from .exc import Unsupported
from .variables.base import ConstantVariable
from .variables.containers import DictVariable, TupleVariable
from .variables.functions import UserFunctionVariable


def _as_dict(v) -> dict:
    if isinstance(v, DictVariable):
        return dict(v.items)
    return {k: ConstantVariable(x) for k, x in v.as_python_constant().items()}


def bind_arguments(func: UserFunctionVariable, args: list, kwargs: dict) -> dict:
    """Bind call arguments to the code's parameters like CPython does (defaults, *args, **kwargs)."""
    code = func.code
    nargs, nkw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    posonly = code.co_posonlyargcount
    has_varargs, has_varkw = bool(code.co_flags & 0x04), bool(code.co_flags & 0x08)
    result: dict = {}
    for i, a in enumerate(args[:nargs]):
        result[names[i]] = a
    extra = args[nargs:]
    if extra and not has_varargs:
        raise Unsupported(
            f"{func.name}() takes {nargs} positional arguments but {len(args)} were given"
        )
    kwonly = names[nargs : nargs + nkw]
    varkw = {}
    for k, v in kwargs.items():
        if k in names[posonly:nargs] or k in kwonly:
            if k in result:
                raise Unsupported(f"{func.name}() got multiple values for argument {k!r}")
            result[k] = v
        elif has_varkw:
            varkw[k] = v
        else:
            raise Unsupported(f"{func.name}() got an unexpected keyword argument {k!r}")
    defaults = func.defaults
    for i in range(nargs):
        n = names[i]
        if n not in result:
            j = i - (nargs - len(defaults))
            if j < 0:
                raise Unsupported(f"{func.name}() missing required argument {n!r}")
            result[n] = defaults[j]
    for n in kwonly:
        if n not in result:
            if n not in func.kwdefaults:
                raise Unsupported(f"{func.name}() missing keyword-only argument {n!r}")
            result[n] = func.kwdefaults[n]
    idx = nargs + nkw
    if has_varargs:
        result[names[idx]] = TupleVariable(extra)
        idx += 1
    if has_varkw:
        result[names[idx]] = DictVariable(varkw)
    return result
