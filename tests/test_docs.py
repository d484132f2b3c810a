"""docs/ stays true to the code: every file, module, function and link a page names exists.

The checks are deliberately simple (they read the Markdown, never import the packages):
- a backticked path ending in ``.py`` exists: relative to the repository root, or as the tail of a
  file in the page's own package (``bytecode/resume.py`` on docs/dynamo-capture.md), or of a file
  elsewhere under packages/, tests/ or benchmarks/ (another package's module named in passing);
- a backticked dotted name starting with ``torchkiln`` resolves statically to a module file under
  packages/*/src and then to names defined in it (``torchkiln_loop_ir.scheduler.Scheduler.fuse``);
- a backticked call such as ``compile_guards(...)`` or ``Scheduler.can_fuse()`` names a function,
  class, method or attribute defined somewhere under packages/*/src (calls into torch and the
  standard library are skipped by their prefix);
- a backticked snake_case or CamelCase identifier appears somewhere in the packages' source;
- every relative Markdown link resolves to a file or folder in the repository;
- there is one page per package, the README links the architecture page and every package page,
  and nothing in the repository points outside it at the old shared architecture notes.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGES = ROOT / "packages"
PAGES = sorted(DOCS.glob("*.md"))
PACKAGE_FOLDERS = sorted(p.name for p in PACKAGES.iterdir() if (p / "pyproject.toml").exists())

# Calls into libraries, not into torchkiln: their names are not ours to check.
EXTERNAL_PREFIXES = (
    "torch.",
    "triton.",
    "tl.",
    "sympy.",
    "networkx.",
    "nx.",
    "os.",
    "sys.",
    "inspect.",
    "types.",
    "functools.",
    "contextvars.",
    "ctypes.",
    "importlib.",
    "dis.",
    "math.",
    "operator.",
    "logging.",
    "warnings.",
    "dataclasses.",
    "bytecode.",
    "np.",
    "numpy.",
    "fx.",
    "python ",
)
EXTERNAL_NAMES = {
    "make_fx",
    "functionalize",
    # C, C++ and OpenMP spelled in the code generators' pages
    "if",
    "__attribute__",
    "omp_get_max_threads",
    # torch's entry-point group for compiler backends (named in the limits of torchkiln.md)
    "torch_dynamo_backends",
}


def _is_external(name: str) -> bool:
    """A Python builtin or a tensor method (``vars()``, ``x.t_()``): not torchkiln's to define."""
    return name in EXTERNAL_NAMES or hasattr(builtins, name) or hasattr(torch.Tensor, name)


BACKTICKED = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CALL = re.compile(r"^([A-Za-z_][\w.]*)\(.*\)$")
DOTTED = re.compile(r"^(torchkiln[\w]*(?:\.[A-Za-z_]\w*)+)$")


def _page_package(page: Path) -> Path | None:
    folder = PACKAGES / page.stem
    return folder if folder.is_dir() else None


def _src_files() -> list[Path]:
    return sorted(p for p in PACKAGES.glob("*/src/**/*.py") if "__pycache__" not in p.parts)


@functools.cache
def _defined_names() -> frozenset[str]:
    """Every function, class, method, assigned and annotated name under packages/*/src."""
    names: set[str] = set()
    for path in _src_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
                names.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
            elif isinstance(node, ast.AnnAssign):
                if isinstance(node.target, ast.Name):
                    names.add(node.target.id)
                elif isinstance(node.target, ast.Attribute):
                    names.add(node.target.attr)
    return frozenset(names)


@functools.cache
def _logger_names() -> frozenset[str]:
    """Logger names the code creates (``torchkiln.guards``): dotted, but not module paths."""
    found = set()
    for path in _src_files():
        found.update(re.findall(r"getLogger\(\s*[\"']([\w.]+)[\"']", path.read_text()))
    from torchkiln_guards.logs import ARTIFACTS  # the registry names its loggers torchkiln.<name>

    found.update(f"torchkiln.{name}" for name in ARTIFACTS)
    return frozenset(found)


@functools.cache
def _module_file(dotted: str) -> Path | None:
    """packages/*/src/<a>/<b>.py (or <a>/<b>/__init__.py) for the module ``a.b``."""
    rel = Path(*dotted.split("."))
    for src in PACKAGES.glob("*/src"):
        for candidate in (src / rel.with_suffix(".py"), src / rel / "__init__.py"):
            if candidate.exists():
                return candidate
    return None


def _top_level(path: Path) -> dict[str, ast.AST | None]:
    """Names a module defines or imports at top level (class bodies kept for nested lookups)."""
    out: dict[str, ast.AST | None] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = None
        elif isinstance(node, ast.Assign):
            out.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
    return out


def _class_members(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            names.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
    return names


def resolve_dotted(dotted: str) -> str | None:
    """None when ``dotted`` (``torchkiln_x.mod.Name.attr``) exists, else what is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return None
        scope = _top_level(path)
        if rest[0] not in scope:
            return f"{rest[0]} is not defined in {path.relative_to(ROOT)}"
        node = scope[rest[0]]
        for name in rest[1:]:
            if not isinstance(node, ast.ClassDef) or name not in _class_members(node):
                return f"{name} is not a member of {'.'.join(parts[: parts.index(name)])}"
            node = next(
                (n for n in node.body if isinstance(n, ast.ClassDef) and n.name == name), None
            )
        return None
    return f"no module {parts[0]} under packages/*/src"


def _backticked(page: Path) -> list[str]:
    text = page.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks are examples, not references
    text = re.sub(r"\s*\n\s*", " ", text)  # inline code may wrap across lines
    return BACKTICKED.findall(text)


def _py_path_exists(token: str, page: Path) -> bool:
    token = token.split(":")[0].split("::")[0]
    if (ROOT / token).exists():
        return True
    # the page's own package first (short paths such as `compile.py` are its files), then the
    # whole tree for a file of another package named in passing
    package = _page_package(page)
    tail = "/" + token.lstrip("./")
    for roots in ([package] if package else [], [PACKAGES, ROOT / "tests", ROOT / "benchmarks"]):
        if any(f.endswith(tail) for r in roots for f in _py_files(r)):
            return True
    return False


@functools.cache
def _py_files(root: Path) -> tuple[str, ...]:
    return tuple(str(p) for p in root.rglob("*.py") if ".nox" not in p.parts)


def test_one_page_per_package() -> None:
    missing = [f for f in PACKAGE_FOLDERS if not (DOCS / f"{f}.md").exists()]
    assert not missing, f"docs/ has no page for: {missing}"
    assert (DOCS / "architecture.md").exists()


def test_readme_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    links = set(LINK.findall(readme))
    wanted = {"docs/architecture.md", *(f"docs/{f}.md" for f in PACKAGE_FOLDERS)}
    assert wanted <= links, f"README.md does not link {sorted(wanted - links)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_paths_exist(page: Path) -> None:
    bad = [
        t
        for t in _backticked(page)
        if re.fullmatch(r"[\w./-]+\.py(:\w+)?", t) and not _py_path_exists(t, page)
    ]
    assert not bad, f"{page.name} names files that do not exist: {bad}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_dotted_names_resolve(page: Path) -> None:
    bad = []
    for token in _backticked(page):
        m = DOTTED.match(token.rstrip("()"))
        if m and m.group(1) not in _logger_names():
            why = resolve_dotted(m.group(1))
            if why:
                bad.append(f"{token}: {why}")
    assert not bad, f"{page.name}: {bad}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_called_names_exist(page: Path) -> None:
    defined = _defined_names()
    bad = []
    for token in _backticked(page):
        m = CALL.match(token)
        if not m or m.group(1).startswith(EXTERNAL_PREFIXES) or token.startswith(EXTERNAL_PREFIXES):
            continue
        name = m.group(1).split(".")[-1]
        if _is_external(name) or name in defined:
            continue
        bad.append(token)
    assert not bad, f"{page.name} calls names defined nowhere under packages/*/src: {bad}"


IDENTIFIER = re.compile(
    r"^(?:[\w.]+\.)?(_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+|_?[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)$"
)


@functools.cache
def _source_words() -> frozenset[str]:
    return frozenset(re.findall(r"\w+", " ".join(p.read_text() for p in _src_files())))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_identifiers_appear_in_code(page: Path) -> None:
    """A backticked snake_case or CamelCase name (``plan_group``, ``FusionDecision``) appears in the
    packages' source: as a definition, a field, or a string the code uses (``welford_reduce``)."""
    words = _source_words()
    bad = []
    for token in _backticked(page):
        m = IDENTIFIER.match(token)
        if m and not token.startswith(EXTERNAL_PREFIXES):
            name = m.group(1)
            if name not in words and not _is_external(name):
                bad.append(token)
    assert not bad, f"{page.name} names identifiers found nowhere under packages/*/src: {bad}"


@pytest.mark.parametrize(
    "page",
    [*PAGES, ROOT / "README.md", *sorted(PACKAGES.glob("*/README.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_links_resolve(page: Path) -> None:
    bad = []
    for target in LINK.findall(re.sub(r"```.*?```", "", page.read_text(), flags=re.S)):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # web addresses and anchors within the page
        if not (page.parent / target.split("#")[0]).exists():
            bad.append(target)
    assert not bad, f"{page.relative_to(ROOT)} links to missing files: {bad}"


def test_nothing_points_outside_the_repository() -> None:
    outside = re.compile(r"\.\./" + "shared|shared/" + "ARCHITECTURE")
    texts = [ROOT / "README.md", ROOT / "noxfile.py", *DOCS.glob("*.md")]
    for folder in (PACKAGES, ROOT / "tests", ROOT / "benchmarks"):
        texts += [p for p in folder.rglob("*") if p.suffix in (".md", ".py", ".toml", ".sh")]
    bad = [
        str(p.relative_to(ROOT))
        for p in texts
        if ".nox" not in p.parts and p.is_file() and outside.search(p.read_text(errors="replace"))
    ]
    assert not bad, f"these files point at notes outside the repository: {bad}"
