"""A guard set compiled into one generated Python check function, and ``explain_failure``.

The generated function takes the same parameters as the user function, so a caller does
``entry.check(*args, **kwargs)`` and Python binds the arguments natively. Inside it, ``L['x']`` is
the local ``x``, ``G[...]`` indexes the bound globals dict, ``C[...]`` reads a bound closure cell.
Guards are deduplicated and ordered by cost rank (cheap, likely-to-fail kinds first); each
derived source (``L['self'].layers``) is fetched once into a local. Any exception while checking
means "does not match": the function returns False instead of raising.
"""

from __future__ import annotations

import builtins
import inspect
import keyword
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .kinds import ConstantMatch, Guard, GuardFailure, LengthMatch, TensorMatch, TypeMatch
from .kinds.base import Raised
from .logs import log_guard_source
from .source import ClosureSource, ItemSource, LocalSource, Source, _Frame

__all__ = [
    "CompiledGuards",
    "GuardCompileError",
    "GuardSet",
    "UnguardableSourceError",
    "compile_guards",
]

_FN_NAME = "___guard_check"
#: a tuple group's memo before any tuple passed (no value the source can hold is this object)
_UNSEEN = object()


class GuardCompileError(Exception):
    """A guard set cannot be compiled into a check function."""


class UnguardableSourceError(GuardCompileError):
    """A guard reads a value the check function cannot reach (e.g. a local that is not a parameter)."""


def order_guards(guards: Iterable[Guard]) -> tuple[Guard, ...]:
    """Deduplicate (equal guards, and TypeMatch implied by a TensorMatch of the same source and
    type) and order by cost rank, keeping the given order among equal ranks."""
    unique: list[Guard] = []
    try:
        unique = list(dict.fromkeys(guards))
    except TypeError:  # an unhashable guard: fall back to pairwise equality
        for g in guards:
            if g not in unique:
                unique.append(g)
    implied = {(g.source, g.type_) for g in unique if isinstance(g, TensorMatch)}
    unique = [g for g in unique if not (type(g) is TypeMatch and (g.source, g.type_) in implied)]
    return tuple(sorted(unique, key=lambda g: g.cost))


class _Emitter:
    """Builds the generated function's body and namespace; the CodeContext guards see."""

    def __init__(self, params: frozenset[str], f_globals: dict, closure: Mapping[str, Any]):
        self.params = params
        self.closure = closure
        self.ns: dict[str, Any] = {"__builtins__": builtins, "___G": f_globals}
        self._const_names: dict[int, str] = {}
        self.lines: list[str] = []
        self._refs: dict[Source, str] = {}
        self._n = 0

    def const(self, obj: object, hint: str) -> str:
        name = self._const_names.get(id(obj))
        if name is None:
            name = f"___{_ident(hint)}{len(self._const_names)}"
            self._const_names[id(obj)] = name
            self.ns[name] = obj
        return name

    def builtin(self, name: str) -> str:
        if name not in self.params:
            return name
        alias = f"___builtin_{name}"
        self.ns[alias] = getattr(builtins, name)
        return alias

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"___{_ident(hint)}_t{self._n}"

    def ref(self, src: Source) -> str:
        """Code reading ``src``: a parameter name, or a local assigned on first use."""
        if src in self._refs:
            return self._refs[src]
        if isinstance(src, LocalSource):
            if src.name not in self.params:
                raise UnguardableSourceError(
                    f"{src.expr()} is not a parameter of the guarded function (parameters: "
                    f"{', '.join(sorted(self.params)) or 'none'}); guard the value it came from instead"
                )
            self._refs[src] = src.name
            return src.name
        if isinstance(src, ClosureSource):
            if src.name not in self.closure:
                raise UnguardableSourceError(
                    f"{src.expr()}: no closure cell named {src.name!r} was given to compile_guards "
                    f"(cells: {', '.join(sorted(self.closure)) or 'none'})"
                )
            self.ns[f"___cell_{src.name}"] = self.closure[src.name]
        base = self.ref(src.base) if src.base is not None else None
        name = self.fresh("v")
        self.lines.append(f"{name} = {src._code(base, self)}  # {src.expr()}")
        self._refs[src] = name
        return name


def _ident(hint: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "c"


def _parameter_list(sig: inspect.Signature, em: _Emitter) -> str:
    parts: list[str] = []
    kinds = [p.kind for p in sig.parameters.values()]
    saw_star = False
    for i, p in enumerate(sig.parameters.values()):
        if p.name.startswith("___") or keyword.iskeyword(p.name):
            raise GuardCompileError(f"parameter name {p.name!r} clashes with generated guard code")
        if p.kind is p.KEYWORD_ONLY and not saw_star:
            parts.append("*")
            saw_star = True
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, saw_star = f"*{p.name}", True
        elif p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
        elif p.default is not p.empty:
            em.ns[f"___default_{p.name}"] = p.default
            text = f"{p.name}=___default_{p.name}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (
            i + 1 == len(kinds) or kinds[i + 1] is not p.POSITIONAL_ONLY
        ):
            parts.append("/")
    return ", ".join(parts)


class CompiledGuards:
    """A guard set compiled to one check function.

    - ``check(*args, **kwargs) -> bool``: the generated function itself (no wrapper frame);
      called with the user function's arguments. Never raises for a value that fails a guard;
      raises TypeError only if the arguments do not fit the signature, as the function would.
    - ``source``: the generated code. ``guards``: the deduplicated guards in check order.
    - ``explain_failure(*args, **kwargs)``: the first failing guard as a GuardFailure, or None.
    """

    __slots__ = ("_closure", "_f_globals", "check", "guards", "signature", "source")

    def __init__(
        self,
        check: Callable[..., bool],
        source: str,
        guards: tuple[Guard, ...],
        signature: inspect.Signature,
        f_globals: dict,
        closure: Mapping[str, types.CellType],
    ) -> None:
        self.check = check
        self.source = source
        self.guards = guards
        self.signature = signature
        self._f_globals = f_globals
        self._closure = closure

    def __repr__(self) -> str:
        return f"<CompiledGuards: {len(self.guards)} guards>"

    def read(self, sources: Iterable[Source], *args: Any, **kwargs: Any) -> dict[Source, Any]:
        """The values ``sources`` name in a call with these arguments (the slow path, as
        ``explain_failure`` reads them); a source that cannot be read (a missing attribute or key,
        arguments that do not bind) is left out. Capture uses it to see which sizes changed since
        an earlier call (automatic dynamic shapes)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return {}
        bound.apply_defaults()
        frame = _Frame(bound.arguments, self._f_globals, self._closure)
        memo: dict[Source, Any] = {}
        values: dict[Source, Any] = {}
        for src in sources:
            try:
                values[src] = _value(src, frame, memo)
            except _SourceError:
                continue
        return values

    def explain_failure(self, *args: Any, **kwargs: Any) -> GuardFailure | None:
        """Evaluate the guards one by one, in check order, and name the first that fails, with its
        source expression and the expected and actual value. None if all hold."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            return GuardFailure(None, "<arguments>", _Text(str(self.signature)), Raised(exc))
        bound.apply_defaults()
        frame = _Frame(bound.arguments, self._f_globals, self._closure)
        memo: dict[Source, Any] = {}
        for guard in self.guards:
            try:
                values = [_value(s, frame, memo) for s in guard.sources]
            except _SourceError as err:
                return GuardFailure(guard, err.source.expr(), _Text("a value"), Raised(err.exc))
            try:
                fail = guard.failure(*values)
            except Exception as exc:  # noqa: BLE001 - explaining must never raise into the caller
                return GuardFailure(guard, guard.summary(), _Text("to hold"), Raised(exc))
            if fail is not None:
                return fail
        return None


class _Text:
    """Shown verbatim in a failure message (no quotes)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class _SourceError(Exception):
    def __init__(self, source: Source, exc: BaseException):
        super().__init__(str(exc))
        self.source, self.exc = source, exc


def _value(src: Source, frame: _Frame, memo: dict) -> Any:
    if src in memo:
        return memo[src]
    base = _value(src.base, frame, memo) if src.base is not None else None
    try:
        val = src._fetch(base, frame)
    except Exception as exc:
        raise _SourceError(src, exc) from exc
    memo[src] = val
    return val


def _constant_tuples(ordered: tuple[Guard, ...]) -> dict[Source, list[Guard]]:
    """The tuples checked only for their type, length and constant items: each tuple's source
    and its guards, in check order.

    A tuple is immutable and so is every constant, so a tuple object that passed these guards
    once passes them again: the check function keeps the last tuple object that passed and skips
    the guards while the source still holds that very object (an ``is`` test, exact: ``(True,
    1)`` is another object than ``(1, 1)``, and is checked in full). A convolution's ``stride``,
    ``padding`` and ``dilation`` are such tuples: of MobileNetV3's 1122 guards, 756 are the type,
    length and items of 189 of them. A tuple with any other guard on or under it (a tensor
    item, an item's attribute, a guard reading several sources) is checked in full every call."""
    tuples = {g.source for g in ordered if type(g) is TypeMatch and g.type_ is tuple}
    members: dict[Source, list[Guard]] = {s: [] for s in tuples}
    spoiled: set[Source] = set()
    for g in ordered:
        (src,) = g.sources if len(g.sources) == 1 else (None,)
        if src in tuples and type(g) in (TypeMatch, LengthMatch):
            members[src].append(g)
            continue
        if (
            type(g) is ConstantMatch
            and type(src) is ItemSource
            and type(src.key) is int
            and src.source in tuples
        ):
            members[src.source].append(g)
            continue
        for read in g.sources:  # anything else on or under a tuple: that tuple is checked in full
            at: Source | None = read
            while at is not None:
                if at in tuples:
                    spoiled.add(at)
                at = at.base
    return {s: gs for s, gs in members.items() if s not in spoiled}


def compile_guards(
    guards: Iterable[Guard],
    *,
    signature: inspect.Signature,
    f_globals: dict,
    closure: Mapping[str, types.CellType] | None = None,
) -> CompiledGuards:
    """Compile ``guards`` into one check function with the parameters of ``signature``.

    ``f_globals`` is the user function's globals dict (read live by ``G[...]`` sources);
    ``closure`` maps free-variable names to their cells (``C[...]`` sources read the cell contents
    at call time). Raises UnguardableSourceError for a local that is not a parameter or an unknown
    closure cell, GuardCompileError for a parameter name that clashes with generated names.
    """
    ordered = order_guards(guards)
    closure = dict(closure or {})
    em = _Emitter(frozenset(signature.parameters), f_globals, closure)
    params = _parameter_list(signature, em)
    body: list[str] = []
    groups = _constant_tuples(ordered)
    group_of = {g: s for s, gs in groups.items() for g in gs}
    memo: list[Any] = []  # per tuple group, the last tuple object that passed its guards
    em.ns["___memo"] = memo
    done: set[Source] = set()

    def emit(guard: Guard, indent: str) -> None:
        em.lines = []
        refs = [em.ref(s) for s in guard.sources]
        test = guard.code(refs, em)
        body.extend(indent + line for line in em.lines)
        body.append(f"{indent}# {guard.summary()}")
        body.append(f"{indent}if not ({test}):")
        body.append(f"{indent}    return False")

    for guard in ordered:
        tuple_source = group_of.get(guard)
        if tuple_source is None:
            emit(guard, "")
            continue
        if tuple_source in done:
            continue
        done.add(tuple_source)
        em.lines = []
        ref = em.ref(tuple_source)
        body.extend(em.lines)
        body.append(f"if {ref} is not ___memo[{len(memo)}]:  # a tuple not seen to pass yet")
        for member in groups[tuple_source]:
            emit(member, "    ")
        body.append(f"    ___memo[{len(memo)}] = {ref}")
        memo.append(_UNSEEN)
    body.append("return True")
    text = "\n".join(
        [f"def {_FN_NAME}({params}):", "    try:"]
        + [f"        {line}" for line in body]
        + ["    except Exception:", "        return False"]
    )
    code = compile(text, "<torchkiln guards>", "exec")
    exec(code, em.ns)  # noqa: S102 - the generated check function is the point of this module
    fn = em.ns[_FN_NAME]
    log_guard_source(text)
    return CompiledGuards(fn, text, ordered, signature, f_globals, closure)


class GuardSet:
    """An ordered, deduplicated collection of guards (see ``order_guards``)."""

    def __init__(self, guards: Iterable[Guard] = ()):
        self.guards = order_guards(guards)

    def __iter__(self) -> Iterator[Guard]:
        return iter(self.guards)

    def __len__(self) -> int:
        return len(self.guards)

    def __repr__(self) -> str:
        inner = "\n".join(f"  {g.summary()}" for g in self.guards)
        return f"GuardSet(\n{inner}\n)" if self.guards else "GuardSet()"

    def add(self, *guards: Guard) -> GuardSet:
        """A new GuardSet with ``guards`` added."""
        return GuardSet((*self.guards, *guards))

    def compile(
        self,
        *,
        signature: inspect.Signature,
        f_globals: dict,
        closure: Mapping[str, types.CellType] | None = None,
    ) -> CompiledGuards:
        """``compile_guards(self, ...)``."""
        return compile_guards(
            self.guards, signature=signature, f_globals=f_globals, closure=closure
        )
