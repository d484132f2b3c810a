"""One home per concept across the packages, checked by reading the sources.

- ``TORCHKILN_LOGS`` is read in one place, the registry ``torchkiln_guards.logs``; every other
  package asks it (``enabled``, ``log_artifact``, ``logger``), so the names and their parsing
  cannot drift apart.
- The nn.Module proxy a compiler hands back is written once, capture's ``ModuleProxy``: no other
  class under packages/ subclasses ``torch.nn.Module`` to stand for an original module
  (``_orig_mod``) unless it subclasses the proxy.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "packages").glob("*/src/**/*.py"))
LOG_REGISTRY = ROOT / "packages/guards/src/torchkiln_guards/logs.py"
PROXY_HOME = ROOT / "packages/dynamo-capture/src/torchkiln_dynamo_capture/module_proxy.py"


def test_sources_are_found() -> None:
    assert LOG_REGISTRY in SOURCES and PROXY_HOME in SOURCES and len(SOURCES) > 100


def test_torchkiln_logs_is_read_only_by_the_registry() -> None:
    readers = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
        if "TORCHKILN_LOGS" in names:  # the exact string (docstrings that mention it are longer)
            readers.append(path.relative_to(ROOT))
    assert readers == [LOG_REGISTRY.relative_to(ROOT)]


def test_one_module_proxy() -> None:
    proxies = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b) for b in node.bases}
            if "_orig_mod" in ast.unparse(node) and bases & {
                "torch.nn.Module",
                "nn.Module",
                "Module",
            }:
                proxies.append((path.relative_to(ROOT), node.name))
    assert proxies == [(PROXY_HOME.relative_to(ROOT), "ModuleProxy")]
