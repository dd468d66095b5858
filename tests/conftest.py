"""Shared fixtures: run the real `mars` CLI in a subprocess, find the shared benchmark data.

`make test-fast` runs the tests not marked `slow`: which are, and why, is under HEAVY below.

With `MARS_TESTS_NO_SKIPS=1` (set by .ci/run) a session that skipped anything fails: a green CI
then means every test ran.

Under pytest-xdist (`make test` runs two workers) a file is one unit of work, so a module's
fixtures are built once, and every `test_verl*_cpu` file is part of a single unit that starts
first: verl's real runs (each its own local Ray cluster, about 40% of the session) go one after
another on one worker while the other runs everything else (the first joins it when done).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data" / "benchmarks"
NO_SKIPS_ENV = "MARS_TESTS_NO_SKIPS"
# The shared test sets are the data root of every test and of every process a test starts.
os.environ.setdefault("MARS_DATA_DIR", str(DATA_DIR))

# Two workers share two cores: a process of either that let torch (OpenMP) take both would have
# its threads spin against the other worker's. One thread each, inherited by every process a test
# starts (verl's Ray workers and model servers included).
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")


def mars_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def run_mars(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mars", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or mars_env(),
        cwd=REPO,
        check=False,
    )


def run_mars_in_process(args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`mars ARGS` in this process, through the command line's own error handling
    (`mars.main._run`: one line on stderr and the exit code); its exit code. For refusals, which
    need no fresh interpreter (a subprocess costs seconds of imports)."""
    import signal

    from mars.main import _run

    monkeypatch.setattr(sys, "argv", ["mars", *args])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        _run()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _is_verl(nodeid: str) -> bool:
    """A file that trains with verl for real here (`test_verl*_cpu.py`): each run is its own
    local Ray cluster. verl's other files (dry runs, configs, the merger) are scheduled as any."""
    name = Path(nodeid.split("::", 1)[0]).name
    return name.startswith("test_verl") and name.endswith("_cpu.py")


# The tiers. `make test` runs every test; `make test-fast` (`-m "not slow"`) the unit tests: none
# builds, trains, loads or serves the tiny model, needs verl or drives a browser. A test is slow
# - when its file marks it `@pytest.mark.slow`, or SLOW_TESTS names it or its file;
# - or when it uses a word of HEAVY (any case): in its own code, in its fixtures', in what those
#   name among the functions, classes and constants of its file or of a module of tests/ it
#   imports (the test kits, conftest.py), or in the imports and top-level calls of those files.
# So a new test that trains the tiny model or needs verl is slow without anyone listing it. One
# that reaches the tiny model unseen, through the project's code in this process, fails with a
# line that says so (pytest_runtest_protocol below); `mars` processes it starts are not watched:
# SLOW_TESTS lists those. tests/test_test_tiers.py checks the rule.
HEAVY = {
    "verl": "needs verl (`make setup-verl`); its real runs each start a Ray cluster",
    "chromium": "drives headless Chromium",
    "ensure_tiny_model": "the tiny model (trained on a cold cache, half a minute on 2 cores)",
    "resolve_model_path": "the tiny model when no model is given",
    "build_tiny_model": "builds and pre-trains a tiny model",
    "pretrain_tiny_model": "format-pre-trains the tiny model",
    "ensure_workflow_start": "format-pre-trains the tiny model for a MAS workflow",
    "workflow_testkit": "trains a MAS workflow on the tiny model",
    "LocalTrainer": "trains the tiny model on the CPU",
    "build_runs": "real `mars` runs for the dashboard, `mars train` on the tiny model among them",
}
# What no word in tests/ shows (`mars` processes that train or serve the tiny model, a bench that
# needs verl) and what takes long (tens of processes):
# "FILE", or "FILE::PART": its tests whose names (parameters included: `test_x[case]`) hold PART.
SLOW_TESTS = {
    "test_readme_quickstart.py": "`mars serve`: the tiny model behind `transformers serve`",
    "test_tiny_model.py": "builds tiny models",
    "test_train_cli.py": "`mars train` in process: the tiny model, loaded or trained",
    "test_api_training.py": "mars.api's training: the tiny model, loaded or trained",
    "test_run_lifecycle.py::changes_nothing[train]": "`mars train`: trains the tiny model",
    "test_parity.py::test_the_local_dry_run": "`mars train --dry-run`: loads the tiny model",
    "test_trackers.py::test_a_cpu_training_run": "`mars train`: trains the tiny model",
    "test_run_writer.py::test_twenty_races": "forty `mars` processes",
    "test_reward_hacks.py::test_all_164_canonical": "164 programs in the sandbox",
    "test_parsers_linear.py::test_a_parser_reads_a_mebibyte": "hostile text through each parser",
    "test_bench_dry_runs.py::passes[plugin_import.py": "bench/plugin_import.py: needs verl",
}
# Files whose words do not count: the rule's own test names HEAVY's words to check the others.
NOT_READ = {"test_test_tiers.py"}


@dataclass
class _Source:
    """One test file or test kit, read for the words its tests use."""

    defs: dict[str, set[str]]  # a top-level function, class or constant -> the words in it
    kits: dict[str, tuple[Path, str]]  # a name imported from a test kit -> (kit, its name there)
    top: set[str]  # the words of its imports and top-level calls (and its kits'): every test's


def _docstring(node: ast.AST) -> ast.AST | None:
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
        value = body[0].value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value
    return None


def _words(node: ast.AST) -> set[str]:
    """Names, attributes, arguments, imported modules and the words of strings (docstrings
    aside) in `node`."""
    docstrings = {id(doc) for sub in ast.walk(node) if (doc := _docstring(sub)) is not None}
    words: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            words.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            words.add(sub.attr)
        elif isinstance(sub, ast.arg):
            words.add(sub.arg)
        elif isinstance(sub, ast.alias):
            words.update(sub.name.split("."))
            words.add(sub.asname or "")
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            words.update(sub.module.split("."))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            words.update(re.findall(r"\w+", sub.value) if id(sub) not in docstrings else ())
    return words - {""}


@functools.cache
def _source(path: Path) -> _Source:
    tree = ast.parse(path.read_text(), str(path))
    source = _Source(defs={}, kits={}, top=set())
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            source.defs[statement.name] = _words(statement)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = [target.id for target in targets if isinstance(target, ast.Name)]
            for name in names:
                source.defs[name] = _words(statement)
            if "pytestmark" in names:
                source.top |= _words(statement)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            source.top |= _words(statement)
            for alias in statement.names:
                module = statement.module if isinstance(statement, ast.ImportFrom) else alias.name
                kit = path.parent / f"{module}.py"
                if module and "." not in module and kit.is_file():
                    source.top |= _source(kit).top
                    if isinstance(statement, ast.ImportFrom):
                        source.kits[alias.asname or alias.name] = (kit, alias.name)
        elif isinstance(statement, ast.Expr) and statement.value is not _docstring(tree):
            source.top |= _words(statement)
    return source


def _used_words(path: Path, names: set[str]) -> set[str]:
    """The words of `names` in `path` (and of what they name there, and in its kits)."""
    conftest = Path(__file__)
    pending = [(path, name) for name in names] + [(conftest, name) for name in names]
    seen: set[tuple[Path, str]] = set()
    words = set(names)
    while pending:
        key = pending.pop()
        if key in seen:
            continue
        seen.add(key)
        file, name = key
        source = _source(file)
        if name in source.kits:
            pending.append(source.kits[name])
        for word in source.defs.get(name, ()):
            words.add(word)
            pending.append((file, word))
    return words


def slow_reason(path: Path, test: str, names: set[str]) -> str | None:
    """Why `test` (a name as pytest shows it: `test_x[case]`) of `path`, which uses `names` (its
    fixtures, its class), is slow by SLOW_TESTS or HEAVY; None if it is not."""
    function = test.split("[", 1)[0]
    for key, why in SLOW_TESTS.items():
        file, _, part = key.partition("::")
        if path.name == file and part in test:
            return why
    if path.name in NOT_READ:
        return None
    used = {word.lower() for word in _source(path).top | _used_words(path, {function, *names})}
    for word, why in HEAVY.items():
        if word.lower() in used:
            return f"{word}: {why}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and isinstance(item, pytest.Function):
            names = set(item.fixturenames) | ({item.cls.__name__} if item.cls else set())
            reason = slow_reason(item.path, item.name, names)
            if reason is not None:
                item.add_marker(pytest.mark.slow(reason=reason))
    items.sort(key=lambda item: not _is_verl(item.nodeid))  # stable: verl's files first


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`-m "not slow"` does not even import a file whose tests are all slow (verl's files take
    seconds each)."""
    path = collection_path
    if config.getoption("markexpr") != "not slow" or not path.name.startswith("test_"):
        return None
    return (path.suffix == ".py" and _all_slow(path)) or None


def _all_slow(path: Path) -> bool:
    """Every test of `path` is slow: SLOW_TESTS names the file, or its imports use HEAVY."""
    if path.name in SLOW_TESTS:
        return True
    if path.name in NOT_READ:
        return False
    try:
        top = {word.lower() for word in _source(path).top}
    except SyntaxError:  # pytest reports it when it imports the file
        return False
    return any(word.lower() in top for word in HEAVY)


_FAST_TEST: list[str] = []  # the id of the test running now if it is not marked slow


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """While a test not marked slow runs, the tiny model's builders refuse (see below)."""
    if item.get_closest_marker("slow") is None:
        _FAST_TEST.append(item.nodeid)
    try:
        return (yield)
    finally:
        _FAST_TEST.clear()


def _refused_in_fast_tests(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, which fails in a test not marked slow (its fixtures of any scope included)."""

    @functools.wraps(function)
    def refused_in_fast_tests(*args: Any, **kwargs: Any) -> Any:
        if _FAST_TEST:
            raise AssertionError(
                f"{_FAST_TEST[0]} reaches the tiny model ({function.__name__}), which makes it "
                "slow: mark it `@pytest.mark.slow` (tests/conftest.py: HEAVY, SLOW_TESTS)"
            )
        return function(*args, **kwargs)

    return refused_in_fast_tests


def _guard_the_tiny_model() -> None:
    """Wrap the tiny model's two builders before any test file imports them: every way to the
    tiny model in this process goes through them (a `mars` process a test starts does not)."""
    import core.tiny_model

    for name in ("ensure_tiny_model", "build_tiny_model"):
        setattr(core.tiny_model, name, _refused_in_fast_tests(getattr(core.tiny_model, name)))


_guard_the_tiny_model()


@pytest.hookimpl(optionalhook=True)  # pytest without xdist runs the tests one by one
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "load":  # another --dist asked for: xdist's own
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFileVerlTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "verl" if _is_verl(nodeid) else nodeid.split("::", 1)[0]

    return ByFileVerlTogether(config, log)


def _skipped(session: pytest.Session) -> list[pytest.TestReport]:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    return list(reporter.stats.get("skipped", [])) if reporter is not None else []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(NO_SKIPS_ENV) == "1" and exitstatus == 0 and _skipped(session):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if os.environ.get(NO_SKIPS_ENV) == "1" and skipped:
        terminalreporter.write_line(
            f"{len(skipped)} skipped (the reasons: -ra's summary below), and {NO_SKIPS_ENV}=1 "
            "allows none: the session fails",
            red=True,
        )
