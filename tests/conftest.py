"""Shared fixtures: run the real `mars` CLI in a subprocess, find the shared benchmark data.

With `MARS_TESTS_NO_SKIPS=1` (set by .ci/run) a session that skipped anything fails: a green CI
then means every test ran.

Under pytest-xdist (`make test` runs two workers) a file is one unit of work, so a module's
fixtures are built once, and every `test_verl*_cpu` file is part of a single unit that starts
first: verl's real runs (each its own local Ray cluster, about 40% of the session) go one after
another on one worker while the other runs everything else (the first joins it when done).
"""

from __future__ import annotations

import os
import subprocess
import sys
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not _is_verl(item.nodeid))  # stable: verl's files first


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
