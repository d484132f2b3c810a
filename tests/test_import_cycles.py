"""No module of a package imports its siblings in a circle at module level.

The import graph of each package is built from the AST of its modules: an edge ``a -> b`` for
every import that runs when ``a`` is first imported (statements at module level, including those
under a top-level ``if``/``try``/``with``, but not inside functions or classes, nor under
``if TYPE_CHECKING:``), resolved to a module of the same package. Package ``__init__`` modules
are left out: they gather their submodules' names by design, and a submodule reaching a name
through its package (``from . import aten``) only needs the package object, which exists by then.

A circle of module-level imports works only as long as each module in it happens to define what
the others read before it imports them; it breaks when someone reorders imports. A circle that
exists for a reason is listed in ``KNOWN_CYCLES`` with that reason; any other fails the test with
the circle spelled out. There are none today.

Imports inside functions are not counted: they run at call time, when every module is loaded.
Counting them too finds circles that are design debts rather than hazards (at the time of
writing: codegen-cpp's ``kernel``/``loopnest``/``_welford`` and loop-ir's ``ir``/``printing``;
torchkiln's ``bench/`` has none since ``record`` holds the rows and ``meta`` writes the result
files; dynamo-capture's ``variables/`` has none, and
``packages/dynamo-capture/tests/test_variables_layering.py`` counts function-level imports too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "packages"

# frozenset of the modules of one strongly connected component -> why it stays
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _package_roots() -> list[Path]:
    return sorted(
        src_pkg
        for folder in PACKAGES.iterdir()
        if (folder / "pyproject.toml").exists()
        for src_pkg in (folder / "src").iterdir()
        if src_pkg.is_dir() and (src_pkg / "__init__.py").exists()
    )


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: list[ast.stmt]):
    """Statements that run on import: recursing into if/try/with, never into defs or classes."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level(block)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            yield from _module_level(node.body)


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> list[str]:
    """The dotted modules an import statement in module ``name`` may load."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    # ``from m import x`` loads m, and m.x when x is a submodule
    return [module] + [f"{module}.{alias.name}" for alias in node.names]


def import_graph(root: Path) -> nx.DiGraph:
    modules = _modules(root)
    packages = {n for n, p in modules.items() if p.name == "__init__.py"}
    graph = nx.DiGraph()
    for name, path in modules.items():
        if name in packages:
            continue
        graph.add_node(name)
        tree = ast.parse(path.read_text(), str(path))
        for node in _module_level(tree.body):
            for target in _targets(node, name, False):
                if target in modules and target not in packages and target != name:
                    graph.add_edge(name, target, line=node.lineno)
    return graph


def cycles(graph: nx.DiGraph) -> list[tuple[frozenset[str], list[str]]]:
    """Each strongly connected component of more than one module, with one circle through it
    (``a.py:12 -> b.py:3 -> a``)."""
    found = []
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        sub = graph.subgraph(component)
        circle = nx.find_cycle(sub, source=min(component))
        steps = [f"{a} (line {sub.edges[a, b]['line']})" for a, b in circle] + [circle[0][0]]
        found.append((frozenset(component), steps))
    return found


@pytest.mark.parametrize("root", _package_roots(), ids=lambda p: p.name)
def test_no_module_level_import_cycles(root: Path) -> None:
    bad = [
        " -> ".join(steps)
        for component, steps in cycles(import_graph(root))
        if component not in KNOWN_CYCLES
    ]
    assert not bad, "module-level import cycles:\n  " + "\n  ".join(bad)


def test_known_cycles_still_exist() -> None:
    """An entry of KNOWN_CYCLES whose circle is gone is stale: delete it."""
    present = {c for root in _package_roots() for c, _ in cycles(import_graph(root))}
    assert not (set(KNOWN_CYCLES) - present), sorted(map(sorted, set(KNOWN_CYCLES) - present))


def test_the_check_finds_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from .b import g\n\ndef f():\n    from .c import h\n")
    (pkg / "b.py").write_text("import pkg.a\n\ng = 1\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    graph = import_graph(pkg)
    assert set(graph.edges) == {("pkg.a", "pkg.b"), ("pkg.b", "pkg.a")}
    ((component, steps),) = cycles(graph)
    assert component == {"pkg.a", "pkg.b"}
    assert steps == ["pkg.a (line 1)", "pkg.b (line 1)", "pkg.a"]


def test_the_graph_reads_real_imports() -> None:
    """Guards the parser: known module-level imports of loop-ir and dynamo-capture are edges."""
    roots = {r.name: r for r in _package_roots()}
    loop_ir = import_graph(roots["torchkiln_loop_ir"])
    assert ("torchkiln_loop_ir.loop_body", "torchkiln_loop_ir.ops") in loop_ir.edges
    assert ("torchkiln_loop_ir.lowering.pointwise", "torchkiln_loop_ir.ir") in loop_ir.edges
    capture = import_graph(roots["torchkiln_dynamo_capture"])
    assert (
        "torchkiln_dynamo_capture.bytecode.resume",
        "torchkiln_dynamo_capture.bytecode.decode",
    ) in capture.edges
