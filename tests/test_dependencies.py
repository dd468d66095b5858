"""pyproject.toml declares what the code imports, and the code imports what it declares: a
dependency nothing uses (openskill and autogen-ext were) costs every install, and one only a
transitive dependency brings (httpx2, through openai) breaks when that dependency moves."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11


REPO = Path(__file__).resolve().parents[1]
OURS = ("core", "harness", "mas", "games", "train_backend", "dashboard", "mars")
# Installed apart, with --no-deps, by `make setup-verl` (its pins would replace torch).
INSTALLED_APART = {"verl"}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = {_name(r) for r in project["dependencies"]}
    optional = {_name(r) for group in project["optional-dependencies"].values() for r in group}
    return required, optional


def _imported_distributions() -> dict[str, set[str]]:
    """Distribution -> the modules of ours that import it (third-party imports only)."""
    owners = packages_distributions()
    found: dict[str, set[str]] = {}
    for package in OURS:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in OURS or top in sys.stdlib_module_names:
                        continue
                    for dist in owners.get(top, [top]):
                        found.setdefault(dist.lower().replace("_", "-"), set()).add(str(path))
    return found


def test_every_declared_dependency_is_imported_somewhere() -> None:
    required, _ = _declared()
    imported = set(_imported_distributions())
    assert sorted(required - imported) == []


def test_every_imported_library_is_declared() -> None:
    required, optional = _declared()
    undeclared = {
        dist: sorted(paths)[:2]
        for dist, paths in _imported_distributions().items()
        if dist not in required | optional | INSTALLED_APART
    }
    assert undeclared == {}
