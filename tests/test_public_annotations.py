"""The public API of every package is annotated and type-checked.

Each name a package exports in `__all__` must carry annotations (every parameter and the return
type of a function; of each public method, `__init__` and `__call__` of a class), and the module
defining it must be in the files mypy checks (`[tool.mypy] files` in pyproject.toml, run by
`nox -s typecheck`). A new export without annotations, or from a module mypy does not check,
fails here before it reaches CI's type check.
"""

from __future__ import annotations

import importlib
import inspect
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "torchkiln_guards",
    "torchkiln_dynamo_capture",
    "torchkiln_aot_partition",
    "torchkiln_loop_ir",
    "torchkiln_codegen_triton",
    "torchkiln_codegen_cpp",
    "torchkiln",
]
# Methods a caller reaches on an exported class, besides the public ones.
DUNDERS = {"__init__", "__new__", "__call__", "__enter__", "__exit__"}


def _is_ours(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in PACKAGES


def _missing(fn: Any) -> list[str]:
    """The parameters (and "return") of `fn` that have no annotation."""
    fn = inspect.unwrap(fn)
    if not inspect.isfunction(fn):
        return []  # a builtin or C function: nothing of ours to annotate
    annotations = fn.__annotations__
    params = list(inspect.signature(fn).parameters.values())
    missing = [
        p.name
        for i, p in enumerate(params)
        if p.name not in annotations and not (i == 0 and p.name in ("self", "cls"))
    ]
    # __init__ may leave out "-> None" when it annotates a parameter (mypy reads it as None).
    if "return" not in annotations and not (
        fn.__name__ == "__init__" and len(params) > 1 and not missing
    ):
        missing.append("return")
    return missing


def _class_members(cls: type) -> list[tuple[str, Any]]:
    """The public callables of `cls` defined by our packages (its own and inherited ones)."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not _is_ours(klass):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") and name not in DUNDERS:
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            elif isinstance(member, property):
                member = member.fget
            elif isinstance(member, type):
                continue  # a nested class is checked where it is exported, if it is
            if inspect.isfunction(member) and _is_ours(member):
                found[name] = member
    return sorted(found.items())


def _unannotated(package: str) -> list[str]:
    module = importlib.import_module(package)
    problems = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) and _is_ours(obj):
            for member_name, member in _class_members(obj):
                if missing := _missing(member):
                    problems.append(f"{package}.{name}.{member_name}: {', '.join(missing)}")
        elif inspect.isfunction(obj) and _is_ours(obj):
            if missing := _missing(obj):
                problems.append(f"{package}.{name}: {', '.join(missing)}")
    return problems


@pytest.mark.parametrize("package", PACKAGES)
def test_exports_are_annotated(package: str) -> None:
    problems = _unannotated(package)
    assert not problems, "exported without annotations:\n  " + "\n  ".join(problems)


def _mypy_files() -> set[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return {(ROOT / f).resolve() for f in config["files"]}


@pytest.mark.parametrize("package", PACKAGES)
def test_exporting_modules_are_type_checked(package: str) -> None:
    module = importlib.import_module(package)
    defining = {Path(inspect.getfile(module)).resolve()}
    for name in module.__all__:
        obj = getattr(module, name)
        if not ((inspect.isclass(obj) or inspect.isfunction(obj)) and _is_ours(obj)):
            continue
        # a class's public methods may come from its bases (a mixin, a base handler)
        for owner in obj.__mro__ if inspect.isclass(obj) else (obj,):
            if _is_ours(owner):
                defining.add(
                    Path(inspect.getfile(importlib.import_module(owner.__module__))).resolve()
                )
    unchecked = sorted(str(p.relative_to(ROOT)) for p in defining - _mypy_files())
    assert not unchecked, (
        f"modules defining {package}'s exports that mypy does not check: {unchecked}"
    )
