"""Generated Python functions: a namespace for the objects they reference and the user's signature."""

from __future__ import annotations

import inspect
from typing import Any


class Namespace:
    """Objects referenced by generated code, each under a fresh name."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def ref(self, obj: Any, hint: str = "c") -> str:
        key = id(obj)
        name = self._ids.get(key)
        if name is None:
            name = f"_{hint}{len(self.values)}"
            self.values[name] = obj
            self._ids[key] = name
        return name

    def exec(self, src: str, name: str):
        code = compile(src, f"<torchkiln generated {name}>", "exec")
        scope = dict(self.values)
        exec(code, scope)  # noqa: S102 - generated guard/run functions are the point
        return scope[name]


def signature_text(sig: inspect.Signature, ns: Namespace) -> tuple[str, str]:
    """(parameter list text with defaults bound through ``ns``, a matching call's argument text)."""
    params, call = [], []
    star_done = False
    for p in sig.parameters.values():
        d = "" if p.default is inspect.Parameter.empty else "=" + ns.ref(p.default, "d")
        if p.kind is p.VAR_POSITIONAL:
            params.append(f"*{p.name}")
            call.append(f"*{p.name}")
            star_done = True
        elif p.kind is p.VAR_KEYWORD:
            params.append(f"**{p.name}")
            call.append(f"**{p.name}")
        elif p.kind is p.KEYWORD_ONLY:
            if not star_done:
                params.append("*")
                star_done = True
            params.append(f"{p.name}{d}")
            call.append(f"{p.name}={p.name}")
        elif p.kind is p.POSITIONAL_ONLY:
            params.append(f"{p.name}{d}")
            call.append(p.name)
        else:
            params.append(f"{p.name}{d}")
            call.append(p.name)
    if any(p.kind is p.POSITIONAL_ONLY for p in sig.parameters.values()):
        last = max(i for i, p in enumerate(sig.parameters.values()) if p.kind is p.POSITIONAL_ONLY)
        params.insert(last + 1, "/")
    return ", ".join(params), ", ".join(call)
