"""The fast tier (`make test-fast`: the tests not marked `slow`) stays fast: tests/conftest.py's
rule marks every test that needs verl, a browser or the tiny model slow, its list of slow tests
names tests that exist, and a test the rule missed cannot reach the tiny model in its process
unnoticed. The tests' source is read with `ast`, none is imported: about a second in all."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import FunctionType

import pytest
from conftest import HEAVY, REPO, SLOW_TESTS, _all_slow, slow_reason

TESTS = REPO / "tests"
TEST_FILES = sorted(TESTS.glob("test_*.py"))
# Imported at the top of a file, each of these (and any verl module) makes all its tests slow.
HEAVY_IMPORTS = {"verl", "verl_testkit", "model_testkit", "workflow_testkit", "dashboard.browser"}
# Named in a test or its fixtures, each of these makes that test slow.
HEAVY_CALLS = {
    "ensure_tiny_model", "build_tiny_model", "pretrain_tiny_model", "resolve_model_path",
    "LocalTrainer", "kuhn_model", "mas_model", "format_model", "train_tiny_workflow", "shared_runs",
}  # fmt: skip


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _top_imports(tree: ast.Module) -> set[str]:
    modules = set()
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom) and statement.module:
            modules.add(statement.module)
        elif isinstance(statement, ast.Import):
            modules.update(alias.name for alias in statement.names)
        elif isinstance(statement, ast.Expr) and "importorskip('verl'" in ast.unparse(statement):
            modules.add("verl")
    modules |= {module.split(".")[0] for module in modules}
    return modules


def _tests(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


def _named(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)} | {
        sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)
    }


def _named_through(tree: ast.Module, test: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """What `test` names, with what its file's fixtures and functions it names name in turn."""
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    named = _named(test) | {arg.arg for arg in test.args.args}
    pending = list(named)
    while pending:
        name = pending.pop()
        if name in functions:
            new = _named(functions.pop(name)) - named
            named |= new
            pending.extend(new)
    return named


def test_a_file_that_imports_verl_a_browser_or_a_tiny_model_kit_is_slow_whole() -> None:
    offenders = []
    for path in TEST_FILES:
        imports = _top_imports(_tree(path))
        heavy = {module for module in imports if module in HEAVY_IMPORTS or module == "verl"}
        if heavy and not _all_slow(path):
            offenders.append(f"{path.name} imports {sorted(heavy)}")
    assert not offenders, f"not slow whole: {offenders}"


def test_a_test_that_builds_trains_or_loads_the_tiny_model_is_slow() -> None:
    offenders = []
    for path in TEST_FILES:
        tree = _tree(path)
        for name, test in _tests(tree).items():
            heavy = _named_through(tree, test) & HEAVY_CALLS
            if heavy and slow_reason(path, name, set()) is None:
                offenders.append(f"{path.name}::{name} uses {sorted(heavy)}")
    assert not offenders, f"not slow: {offenders}"


def test_each_entry_of_the_slow_list_names_a_test_file_and_its_tests_exist() -> None:
    for key in SLOW_TESTS:
        file, _, part = key.partition("::")
        path = TESTS / file
        assert path.is_file(), f"SLOW_TESTS: {file} is no test file (renamed? removed?)"
        function = part.split("[", 1)[0]
        names = _tests(_tree(path))
        assert any(function in name for name in names), f"SLOW_TESTS: {key} matches no test"


def test_the_fast_tier_keeps_most_of_the_tests() -> None:
    """A word of HEAVY too common would move the unit tests out of the fast tier unnoticed."""
    fast = total = 0
    for path in TEST_FILES:
        tests = _tests(_tree(path))
        total += len(tests)
        fast += sum(slow_reason(path, name, set()) is None for name in tests)
    assert fast > 0.6 * total, f"only {fast} of {total} test functions are in the fast tier"


def test_a_fast_test_that_reaches_the_tiny_model_fails_with_a_line_that_says_so() -> None:
    import core.tiny_model

    # This test is fast, so the guarded builders refuse while it runs (it names neither: the
    # rule would make it slow, and then nothing would be refused).
    guarded = [
        value
        for value in vars(core.tiny_model).values()
        if isinstance(value, FunctionType) and value.__code__.co_name == "refused_in_fast_tests"
    ]
    assert len(guarded) == 2 and {function.__name__ for function in guarded} <= HEAVY.keys()
    for function in guarded:
        with pytest.raises(AssertionError, match=r"makes it slow: mark it `@pytest.mark.slow`"):
            function()


def test_the_fast_tier_needs_no_verl_and_no_browser() -> None:
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^test-fast:(.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target is not None, "the Makefile has no test-fast target"
    prerequisites, recipe = target.groups()
    assert prerequisites.split() == ["setup"]  # not setup-verl, no chromium
    assert '-m "not slow"' in recipe
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^markers = \[[^\]]*"slow:', pyproject, re.MULTILINE)
