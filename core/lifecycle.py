"""One run's life, the same for every command that writes a run directory.

    with run_lifecycle(out=..., run_dir=..., kind=..., slug=..., identity=...) as life:
        done = life.resume(record_key)      # the records kept from an earlier attempt
        life.start(config=..., model=...)   # run.json: settings, versions, attempt
        ...                                 # the work, appending records
        life.finish(RunStatus.after(errors))

Entering takes the run's writer lock (`WriterLock`: one writer per run directory; a second
is refused in one line naming the first) and checks the identity: a run directory recorded with
other settings is refused, in one line naming each change, before anything in it changes.
Ctrl-C (or SIGTERM) after this attempt started records `interrupted`, any other error `failed`,
unless the work already recorded how it ended (a trainer that marks its own run); a directory
this command created and left empty (it failed before recording anything) is removed. The exit
codes are in docs/run-format.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from core.run_lock import WriterLock
from core.runstore import RunDir, RunStatus

# What run.json records as the command that started a run: the `mars` command line when the
# program runs one (mars.main sets COMMAND_LINE), else the library call (mars.api.plans sets
# LIBRARY_CALL), else this process's arguments.
COMMAND_LINE: list[str] | None = None
LIBRARY_CALL: ContextVar[list[str] | None] = ContextVar("library_call", default=None)


def invocation() -> list[str]:
    """The command line, or the library call, that started this run."""
    if COMMAND_LINE is not None:
        return list(COMMAND_LINE)
    return LIBRARY_CALL.get() or ["mars", *sys.argv[1:]]


class RunLifecycle:
    def __init__(self, run: RunDir, identity: dict[str, Any]) -> None:
        self.run = run
        self.identity = identity

    @property
    def path(self) -> Path:
        return self.run.path

    def check(self, identity: dict[str, Any]) -> None:
        """Check again with a fuller identity (e.g. once a server has named its model)."""
        self.identity = identity
        self.run.check_identity(identity)

    def resume(self, key: Callable[[dict[str, Any]], Hashable]) -> set[Hashable]:
        """Keep one good record per key from earlier attempts; return their keys."""
        return self.run.prepare_resume(key)

    def start(self, **info: Any) -> None:
        """Write run.json (`info`: config, model, endpoint, seeds) with the command line."""
        self.run.start(command=invocation(), identity=self.identity, **info)

    def finish(self, status: RunStatus) -> None:
        self.run.finish(status)


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _attempts(run: RunDir) -> int:
    return run.info().attempts if run.info_path.is_file() else 0


def _unfinished(run: RunDir, attempts_before: int) -> bool:
    """Whether this attempt started the run (by `start`, or work that starts it itself, such as
    a trainer) and nothing has recorded how it ended."""
    return _attempts(run) > attempts_before and run.info().status == RunStatus.RUNNING


@contextmanager
def run_lifecycle(
    *,
    out: Path | None,
    run_dir: Path | None,
    kind: str,
    slug: str,
    identity: dict[str, Any],
    complete: bool = True,
) -> Iterator[RunLifecycle]:
    """`complete=False`: the identity is partial until `check` is called with the rest (keys it
    lacks are not compared yet)."""
    created = run_dir is None or not Path(run_dir).exists()  # only what this command makes
    run = RunDir.resolve(out=out, run_dir=run_dir, kind=kind, slug=slug)
    life = RunLifecycle(run, identity)
    lock = WriterLock(run.path)
    try:
        lock.acquire()
    except BaseException:
        if created and _is_empty_dir(run.path):
            run.path.rmdir()
        raise
    if lock.took_over:
        print(f"note: {run.path} was left locked by {lock.took_over}, no longer running; resuming")
    attempts_before = _attempts(run)
    try:
        run.check_identity(identity, complete=complete)
        yield life
    except KeyboardInterrupt:
        if _unfinished(run, attempts_before):
            life.finish(RunStatus.INTERRUPTED)
        raise
    except Exception:
        if _unfinished(run, attempts_before):
            life.finish(RunStatus.FAILED)
        raise
    finally:
        run.close()
        lock.release()
        if created and _is_empty_dir(run.path):
            run.path.rmdir()
