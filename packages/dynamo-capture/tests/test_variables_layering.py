"""The modules of ``variables/`` import each other in one direction, at module level only.

Every import statement of every module, inside functions too, is read from the AST: an edge
``a -> b`` when module ``a`` of ``variables/`` imports module ``b`` of it. The graph must be
acyclic (what a family cannot decide alone it asks the translator for: ``tx.call_value``,
``tx.contains``), every such import must sit at module level (an import inside a function is how a
circle hides), and nothing in ``variables/`` imports the translator that drives it.

The last test checks the cross-family paths that go through the translator, against eager.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import graphlib
import operator
from pathlib import Path

import torch
import torchkiln_dynamo_capture.variables as variables_pkg
from torchkiln_dynamo_capture import capture

PACKAGE = "torchkiln_dynamo_capture"
VARIABLES_DIR = Path(variables_pkg.__file__).parent


def _imported_modules(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """Dotted names an import statement in ``PACKAGE.variables.<module>`` may load."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = [PACKAGE, "variables", module][: 3 - node.level]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [target] + [f"{target}.{alias.name}" for alias in node.names]


def variables_imports(folder: Path) -> tuple[dict[str, set[str]], list[str], list[str]]:
    """(the modules each module in ``folder`` imports, imports of a sibling made inside a function
    or class, imports of the package's translator), from every import statement."""
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    nested: list[str] = []
    upward: list[str] = []
    for name in sorted(names):
        graph[name] = set()
        tree = ast.parse((folder / f"{name}.py").read_text())
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported_modules(node, name):
                if target == f"{PACKAGE}.translator":
                    upward.append(f"{name}.py:{node.lineno}")
                prefix = f"{PACKAGE}.variables."
                sibling = target[len(prefix) :] if target.startswith(prefix) else None
                if sibling in names and sibling != name:
                    graph[name].add(sibling)
                    if id(node) not in top_level:
                        nested.append(f"{name}.py:{node.lineno} imports {sibling}")
    return graph, nested, upward


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports (``[a, b, a]``), or None when the graph is acyclic."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        return list(e.args[1])
    return None


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def test_variables_modules_import_each_other_in_one_direction() -> None:
    graph, nested, upward = variables_imports(VARIABLES_DIR)
    assert len(graph) >= 15 and sum(map(len, graph.values())) >= 30  # the parser reads them
    found = circle(graph)
    assert found is None, "variables/ modules import each other in a circle: " + " -> ".join(
        found or []
    )
    assert not nested, "imports of a sibling inside a function or class: " + "; ".join(nested)
    assert not upward, "variables/ imports the translator: " + "; ".join(upward)
    # the family files sit below the cross-family modules, never the other way round
    for family in (
        "base",
        "containers",
        "tensors",
        "functions",
        "objects",
        "modules",
        "ctx",
        "generators",
    ):
        for policy in ("calls", "classes", "operators", "builtins"):
            assert not reaches(graph, family, policy), f"{family} reaches {policy}"
    assert graph["base"] == set()
    assert reaches(graph, "calls", "base") and not reaches(graph, "base", "calls")


def test_the_check_finds_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import g\n")
    (tmp_path / "c.py").write_text("from ..translator import Suspend\n")
    graph, nested, upward = variables_imports(tmp_path)
    assert graph == {"a": {"b"}, "b": {"a"}, "c": set()}
    assert set(circle(graph) or []) == {"a", "b"}
    assert nested == ["b.py:2 imports a"] and upward == ["c.py:1"]


class _Scaler:
    """Callable through C code (a partial is no descriptor: ``_SCALER(4)`` is ``mul(3, 4)``)."""

    __call__ = functools.partial(operator.mul, 3)


_SCALER = _Scaler()


class _Box:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.t


def test_calls_and_membership_through_the_translator() -> None:
    """A constant's call (``ConstantVariable.call``), a real object's ``__call__`` that is not a
    Python function (``UserObjectVariable.call``), membership in a dict's values and items
    (``DictViewVariable``), a ``with torch.set_grad_enabled(False)`` block and a dataclass
    compared in the graph: each crosses families through ``tx``."""

    @dataclasses.dataclass
    class Pair:
        a: int
        b: int

    scale = functools.partial(torch.mul, other=3.0)  # a real callable reached as a constant

    def f(x, y, d):
        out = scale(x) + _Box(y)(x) * _SCALER(4)
        if y in d.values() and ("k", 2) in d.items() and ("z", 2) not in d.items():
            out = out + 1
        with torch.set_grad_enabled(False):
            z = out * 2
        if Pair(1, 2) == Pair(1, 2) and max(len(d), 1) == 2:
            z = z - 1
        return z

    cf = capture(f, lambda gm, inputs: gm.forward)
    for _ in range(2):
        x, y = torch.randn(4), torch.randn(4)
        d = {"t": y, "k": 2}
        torch.testing.assert_close(cf(x, y, d), f(x, y, d))
        assert cf.graph_breaks == []
