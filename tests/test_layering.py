"""The dependency rule of docs/architecture.md, checked by reading every import.

A file under packages/<folder>/src may import a sibling torchkiln package only if that package's
pyproject declares it, and no file may reach into the parts of torch that torchkiln rebuilds.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "packages"

FORBIDDEN_MODULES = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch.aot_autograd",
    "torch._functorch.partitioners",
    "torch._functorch.compilers",
    "torch.export",
    "torch._export",
    "torch._C._dynamo",
    # TorchDynamo's numpy-on-torch layer: capture traces numpy with its own table
    # (dynamo-capture's variables/numpy_table.py)
    "torch._numpy",
)
# Attribute chains that reach the same systems without an import statement.
FORBIDDEN_ATTRIBUTES = FORBIDDEN_MODULES + ("torch.compile",)


def _package_dirs() -> list[Path]:
    return sorted(p for p in PACKAGES.iterdir() if (p / "pyproject.toml").exists())


def _import_name(package_dir: Path) -> str:
    (src,) = [p for p in (package_dir / "src").iterdir() if p.is_dir() and p.name.isidentifier()]
    return src.name


def _requirements(package_dir: Path) -> list[str]:
    """Every requirement of the package: its dependencies and those of its extras (an import
    of an extra's package is declared too: it is made only where that extra is needed)."""
    meta = tomllib.loads((package_dir / "pyproject.toml").read_text())["project"]
    extras = meta.get("optional-dependencies", {}).values()
    return [*meta["dependencies"], *(r for group in extras for r in group)]


def _declared(package_dir: Path) -> set[str]:
    return {
        re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip()
        for requirement in _requirements(package_dir)
    }


def _dist_name(package_dir: Path) -> str:
    return tomllib.loads((package_dir / "pyproject.toml").read_text())["project"]["name"]


SIBLINGS = {_import_name(p): _dist_name(p) for p in _package_dirs()}


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _attribute_chains(tree: ast.AST) -> list[tuple[str, int]]:
    return [
        (name, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and (name := _dotted(node))
    ]


def _string_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """importlib.import_module("torch._dynamo") and friends."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            callee = _dotted(node.func) or ""
            if callee.endswith(("import_module", "__import__")) and isinstance(
                node.args[0].value, str
            ):
                found.append((node.args[0].value, node.lineno))
    return found


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("package_dir", _package_dirs(), ids=lambda p: p.name)
def test_imports_follow_the_dependency_rule(package_dir: Path) -> None:
    own = _import_name(package_dir)
    declared = _declared(package_dir)
    problems = []
    files = sorted((package_dir / "src").rglob("*.py"))
    assert files, f"{package_dir} has no source files"
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(ROOT)
        for name, line in _imports(tree) + _string_imports(tree):
            top = name.split(".")[0]
            if top in SIBLINGS and top != own and SIBLINGS[top] not in declared:
                problems.append(f"{where}:{line} imports {top}, not declared in its pyproject")
            for forbidden in FORBIDDEN_MODULES:
                if _is_under(name, forbidden):
                    problems.append(f"{where}:{line} imports {name}, which torchkiln rebuilds")
        for name, line in _attribute_chains(tree):
            for forbidden in FORBIDDEN_ATTRIBUTES:
                if _is_under(name, forbidden):
                    problems.append(f"{where}:{line} uses {name}, which torchkiln rebuilds")
    assert not problems, "\n".join(sorted(set(problems)))


# import name -> distribution name, for the third-party packages the sources import
THIRD_PARTY = {
    "torch": "torch",
    "sympy": "sympy",
    "filelock": "filelock",
    "networkx": "networkx",
    "bytecode": "bytecode",
    "rich": "rich",
    "triton": "triton",
    "numpy": "numpy",
    "matplotlib": "matplotlib",
    "transformers": "transformers",
    "timm": "timm",
}


@pytest.mark.parametrize("package_dir", _package_dirs(), ids=lambda p: p.name)
def test_third_party_imports_are_declared(package_dir: Path) -> None:
    """A package declares every third-party package it imports (pip installs nothing else)."""
    declared = _declared(package_dir)
    problems = []
    for path in sorted((package_dir / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, line in _imports(tree):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in SIBLINGS:
                continue
            dist = THIRD_PARTY.get(top)
            where = f"{path.relative_to(ROOT)}:{line}"
            if dist is None:
                problems.append(f"{where} imports {top}: name its distribution in THIRD_PARTY")
            elif dist not in declared:
                problems.append(f"{where} imports {top}, not declared in its pyproject")
    assert not problems, "\n".join(sorted(set(problems)))


def test_python_and_torch_ranges_are_bounded() -> None:
    """Supported Python and torch versions are declared with an upper bound: private torch APIs
    and CPython bytecode change between releases, so an unbounded range would be a promise."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    for package_dir in _package_dirs():
        meta = tomllib.loads((package_dir / "pyproject.toml").read_text())["project"]
        python = SpecifierSet(meta["requires-python"])
        assert "3.11" in python and "3.12" in python and "3.13" not in python, package_dir.name
        for text in _requirements(package_dir):
            requirement = Requirement(text)
            if requirement.name == "torch":
                spec = requirement.specifier
                assert "2.11.0" in spec and "2.13.0" in spec and "2.14.0" not in spec, text


def test_the_benchmark_peer_lives_outside_packages() -> None:
    """torch.compile is called only by benchmarks/peer.py, which the bench command loads by path."""
    assert "torch.compile(" in (ROOT / "benchmarks" / "peer.py").read_text()


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    tree = ast.parse(
        "import torch._dynamo\nfrom torch._inductor import config\nx = torch.compile(f)"
    )
    names = [n for n, _ in _imports(tree)] + [n for n, _ in _attribute_chains(tree)]
    assert any(_is_under(n, "torch._dynamo") for n in names)
    assert any(_is_under(n, "torch._inductor") for n in names)
    assert any(_is_under(n, "torch.compile") for n in names)


def test_torch_numpy_is_forbidden_under_packages() -> None:
    """torch._numpy (TorchDynamo's numpy written in torch) is what capture's numpy table
    rebuilds: no import, from-import or attribute chain of it is allowed under packages/."""
    tree = ast.parse(
        "import torch._numpy as tnp\nfrom torch._numpy import _dtypes_impl\ny = torch._numpy.sum"
    )
    for names in (_imports(tree), _attribute_chains(tree)):
        hits = [n for n, _ in names if any(_is_under(n, f) for f in FORBIDDEN_ATTRIBUTES)]
        assert any(_is_under(n, "torch._numpy") for n in hits), names
    for path in sorted(PACKAGES.rglob("*.py")):
        text = path.read_text()
        assert "torch._numpy" not in text, f"{path.relative_to(ROOT)} names torch._numpy"


def test_every_package_has_its_own_version_and_files() -> None:
    for package_dir in _package_dirs():
        init = package_dir / "src" / _import_name(package_dir) / "__init__.py"
        assert re.search(r'^__version__ = "\d+\.\d+\.\d+"', init.read_text(), re.MULTILINE), init
        for name in ("README.md", "CHANGELOG.md"):
            assert (package_dir / name).read_text().strip(), package_dir / name
        assert (package_dir / "tests").is_dir()


def test_sibling_dependencies_are_version_ranges() -> None:
    dists = set(SIBLINGS.values())
    for package_dir in _package_dirs():
        for requirement in _requirements(package_dir):
            name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
            if name in dists:
                assert ">=" in requirement and "<" in requirement, requirement


def _version(package_dir: Path) -> str:
    init = package_dir / "src" / _import_name(package_dir) / "__init__.py"
    return re.search(r'^__version__ = "([^"]+)"', init.read_text(), re.MULTILINE).group(1)


def test_sibling_ranges_admit_the_siblings_in_this_tree() -> None:
    """A bumped package must not fall outside the range a sibling pins (pip refuses to install)."""
    from packaging.requirements import Requirement

    versions = {_dist_name(p): _version(p) for p in _package_dirs()}
    for package_dir in _package_dirs():
        for text in _requirements(package_dir):
            requirement = Requirement(text)
            if requirement.name in versions:
                have = versions[requirement.name]
                assert requirement.specifier.contains(have), (
                    f"{_dist_name(package_dir)} requires {text}, the tree has {have}"
                )


def _install_closure(dist: str) -> set[str]:
    """Every distribution ``pip install <dist>`` pulls in, read from the pyprojects: the
    package's dependencies (not its extras), and for a sibling, its dependencies in turn."""
    from packaging.requirements import Requirement

    folders = {_dist_name(p): p for p in _package_dirs()}
    seen: set[str] = set()
    todo = [dist]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in folders:
            meta = tomllib.loads((folders[name] / "pyproject.toml").read_text())["project"]
            todo += [Requirement(text).name for text in meta["dependencies"]]
    return seen


def test_a_cpu_only_install_pulls_in_neither_triton_nor_codegen_triton() -> None:
    """``pip install torchkiln`` without the "triton" extra installs no triton and no Triton code
    generator (platforms without a triton wheel can install it); the extra brings both.
    packages/torchkiln/tests/test_dropin.py runs torchkiln on CPU with both unimportable."""
    from packaging.requirements import Requirement

    closure = _install_closure("torchkiln")
    assert "torchkiln-codegen-cpp" in closure and "torch" in closure
    assert not {"triton", "torchkiln-codegen-triton"} & closure, sorted(closure)
    meta = tomllib.loads((PACKAGES / "torchkiln" / "pyproject.toml").read_text())["project"]
    extra = {Requirement(text).name for text in meta["optional-dependencies"]["triton"]}
    assert {"triton", "torchkiln-codegen-triton"} <= extra
