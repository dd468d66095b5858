"""Shared fixtures: run the real `mars` CLI in a subprocess, find the shared benchmark data.

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
from dataclasses import dataclass
from pathlib import Path

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


# The tiers: `make test` runs every test, `make test-fast` those not marked `slow`: the unit tests,
# none of which builds, trains, loads or serves the tiny model, needs verl or drives a browser.
# A test is `slow` when its file marks it so (`@pytest.mark.slow`), when SLOW_TESTS names it or
# its file, or when it uses one of HEAVY: the word (any case) is in its own code, in a fixture's
# it uses, in what those name among the functions, classes and constants of its file or of a test
# kit it imports (tests/*testkit.py, conftest.py), or in the imports and top-level calls of its
# file and those kits. So a new test that trains the tiny model or needs verl is slow without
# anyone listing it; and a test not marked slow that reaches the tiny model or a model server
# anyway (through the project's code) fails with a line that says so (`_refuse_heavy`).
HEAVY = {
    "verl": "needs verl (`make setup-verl`); its real runs each start a Ray cluster",
    "verl_testkit": "needs verl",
    "chromium": "drives headless Chromium",
    "ensure_tiny_model": "the tiny model (trained on a cold cache, half a minute on 2 cores)",
    "resolve_model_path": "the tiny model when no model is given",
    "build_tiny_model": "builds and pre-trains a tiny model",
    "pretrain_tiny_model": "format-pre-trains the tiny model",
    "ensure_workflow_start": "format-pre-trains the tiny model for a MAS workflow",
    "model_testkit": "the tiny model format-pre-trained for the tests",
    "workflow_testkit": "trains a MAS workflow on the tiny model",
    "LocalTrainer": "trains the tiny model on the CPU",
    "build_runs": "real `mars` runs for the dashboard, `mars train` on the tiny model among them",
}
# What no word shows (`mars` processes that train or serve the tiny model, tens of processes):
# "FILE", or "FILE::PART": its tests whose names (parameters included: `test_x[case]`) hold PART.
SLOW_TESTS = {
    "test_readme_quickstart.py": "`mars serve`: the tiny model behind `transformers serve`",
    "test_run_lifecycle.py::changes_nothing[train]": "`mars train`: trains the tiny model",
    "test_train_cli.py::test_train_writes_run_dir": "`mars train`, in process: the tiny model",
    "test_run_writer.py::test_twenty_races": "forty `mars` processes",
    "test_reward_hacks.py::test_all_164_canonical": "164 programs in the sandbox",
}


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """A test not marked slow that reaches the tiny model in this process (in a fixture of any
    scope too) fails: it belongs to the slow tier, even where the model is already built."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    import core.tiny_model

    def _refuse_heavy(what: str) -> object:
        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError(
                f"{item.nodeid} {what}, which makes it slow: mark it `@pytest.mark.slow` "
                "(`make test-fast` leaves it out; tests/conftest.py: HEAVY)"
            )

        return refuse

    patches = pytest.MonkeyPatch()
    patches.setattr(core.tiny_model, "ensure_tiny_model", _refuse_heavy("uses the tiny model"))
    patches.setattr(core.tiny_model, "build_tiny_model", _refuse_heavy("builds a tiny model"))
    try:
        return (yield)
    finally:
        patches.undo()


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
