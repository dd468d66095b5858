"""Every name a bench script imports from the project exists: the benches run by hand, not in CI,
so a moved or renamed function would otherwise break one silently (imports inside functions
included, which running `--help` would not reach)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("core", "harness", "mars", "mas", "games", "train_backend", "dashboard", "bench")
BENCHES = sorted((REPO / "bench").glob("*.py"))


def project_imports(path: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        ours = isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        if ours and node.module.split(".")[0] in OURS:
            found += [(node.module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("path", BENCHES, ids=lambda path: path.name)
def test_a_bench_imports_only_names_that_exist(path: Path) -> None:
    missing = []
    for module_name, name in project_imports(path):
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ImportError:
                missing.append(f"{module_name}.{name}")
    assert missing == []
