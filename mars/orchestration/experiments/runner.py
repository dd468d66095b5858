"""Run an experiment's parts in order, each as its `mars` command in a subprocess; resume.

A finished part is skipped (refused, in one line, if its command line or files changed since:
`--fresh PART` redoes it); an unfinished one is rerun with the same command line, which the
command resumes itself (recorded work kept). One runner per experiment folder (a writer lock);
a part dies with its runner (a parent-death signal), and a part left running by a runner killed
before that is refused while it lives. A part that fails is retried `retries` times; if
it still fails, the parts that read it are skipped as blocked and the others go on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ExitCode, MarsError
from core.files import write_json_atomic
from core.run_lock import WriterLock
from mars.orchestration.experiments.parts import (
    LOGS,
    PartState,
    Resolved,
    build_starts_side_by_side,
    part_state,
    resolve_parts,
)
from mars.orchestration.experiments.spec import Experiment, part_references

STATE_FILE = "experiment.json"
PR_SET_PDEATHSIG = 1


@dataclass
class PartOutcome:
    name: str
    status: str  # done (skipped), completed, unscored, failed, blocked
    wall_s: float = 0.0
    attempts: int = 0
    exit_code: int | None = None
    log: str | None = None
    inputs: list[str] | None = None  # the command line and files it ran with (`_inputs`)


@dataclass
class Outcome:
    parts: list[PartOutcome] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [p.name for p in self.parts if p.status in ("failed", "blocked")]


def run_experiment(
    experiment: Experiment,
    root: Path,
    *,
    source: Path,
    only: list[str] | None = None,
    fresh: list[str] | None = None,
    log: Callable[[str], None] = print,
    runner: Callable[[list[str], Path, float | None], int] | None = None,
) -> Outcome:
    """Every part (or those of `only`) in order; the state in EXP/experiment.json. The parts of
    `fresh` are redone: their folders are set aside (renamed, not deleted) first."""
    run = runner or run_logged
    root.mkdir(parents=True, exist_ok=True)
    lock = WriterLock(root).acquire()  # one runner per experiment folder
    try:
        return _run_parts(experiment, root, source, only or [], fresh or [], run, log)
    finally:
        lock.release()


def _run_parts(
    experiment: Experiment,
    root: Path,
    source: Path,
    only: list[str],
    fresh: list[str],
    run: Callable[[list[str], Path, float | None], int],
    log: Callable[[str], None],
) -> Outcome:
    built = build_starts_side_by_side(experiment, root, only)
    if built:
        log(f"starts built side by side: {', '.join(built)}")
    chosen = resolve_parts(experiment, root, build=True, only=only)
    _refuse_live_or_changed_parts(chosen, root, fresh)
    for item in chosen:
        if item.part.name in fresh:
            _set_aside(item, log)
    outcome = Outcome()
    broken: set[str] = set()
    start = time.monotonic()
    for item in chosen:
        name = item.part.name
        blockers = [n for n in part_references(item.part) if n in broken]
        if blockers:
            broken.add(name)
            outcome.parts.append(PartOutcome(name, "blocked"))
            log(f"[{name}] blocked: {', '.join(blockers)} failed")
            continue
        if part_state(item) is PartState.DONE and name not in fresh:
            outcome.parts.append(PartOutcome(name, "done", inputs=_inputs(item, root)))
            log(f"[{name}] done already: skipped")
            continue
        result = _run_part(item, root, run, log)
        outcome.parts.append(result)
        if result.status == "failed":
            broken.add(name)
        _save_state(root, experiment, source, outcome, time.monotonic() - start)
    outcome.wall_s = time.monotonic() - start
    _save_state(root, experiment, source, outcome, outcome.wall_s)
    return outcome


def _run_part(
    item: Resolved, root: Path, run: Callable[[list[str], Path, float | None], int], log: Any
) -> PartOutcome:
    name = item.part.name
    log_path = root / LOGS / f"{name}.log"
    item.write_files()
    started = time.monotonic()
    code = 0
    for attempt in range(1, item.part.retries + 2):
        how = "resuming" if part_state(item) is PartState.UNFINISHED else "running"
        log(f"[{name}] {how}: mars {' '.join(item.argv)}")
        code = run(item.command, log_path, item.part.timeout_s)
        wall = round(time.monotonic() - started, 1)
        # exit 4: the command ran but had nothing to score (e.g. a judge whose every reply
        # failed to parse): finished, and the report says so.
        if code in (0, ExitCode.NO_SCORE):
            status = "completed" if code == 0 else "unscored"
            log(f"[{name}] {status} in {wall:.0f} s")
            inputs = _inputs(item, root)
            return PartOutcome(name, status, wall, attempt, code, str(log_path), inputs)
        if code in (ExitCode.BAD_INPUT, ExitCode.INTERRUPTED):
            break  # another attempt would fail the same way, or the user stopped it
        log(f"[{name}] exited with {code} (log: {log_path})")
    log(f"[{name}] failed with exit code {code}; see {log_path}")
    wall = round(time.monotonic() - started, 1)
    return PartOutcome(name, "failed", wall, attempt, code, str(log_path))


def _inputs(item: Resolved, root: Path) -> list[str]:
    """What decides a part's result: its command line (the experiment folder written `${exp}`,
    so a moved folder is the same; without `--fresh` and `--logger`, which change no result)
    and the content of each file it reads."""
    here = str(root)
    argv = [arg.replace(here, "${exp}") for arg in _without_logger(item.argv) if arg != "--fresh"]
    files = [
        f"{str(path).replace(here, '${exp}')}: {json.dumps(data, sort_keys=True)}"
        for path, data in sorted(item.files.items())
    ]
    return argv + files


def _without_logger(argv: list[str]) -> list[str]:
    """`argv` less its `--logger NAMES` (trackers: where the metrics also go)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--logger":
            skip = True
        elif not arg.startswith("--logger="):
            kept.append(arg)
    return kept


def _refuse_live_or_changed_parts(items: list[Resolved], root: Path, fresh: list[str]) -> None:
    """Before any part runs: one line for a part whose folder a live command still writes (a
    runner killed before it), or a finished part whose command or files changed since."""
    recorded = read_state(root).get("parts", {})
    for item in items:
        name = item.part.name
        holder = WriterLock.holder(item.run_dir)
        if holder is not None:
            raise MarsError(
                f"part {name} is still running in {item.run_dir} ({holder}), started by an "
                "earlier `mars experiment`; wait for it or stop it, then rerun"
            )
        before = (recorded.get(name) or {}).get("inputs")
        if name in fresh or before is None or part_state(item) is not PartState.DONE:
            continue
        now = _inputs(item, root)
        if now != before:
            gone = [arg for arg in before if arg not in now][:3]
            new = [arg for arg in now if arg not in before][:3]
            raise MarsError(
                f"part {name} finished with other settings ({' '.join(gone)} -> "
                f"{' '.join(new)}); restore them, or redo it with --fresh {name}"
            )


def _set_aside(item: Resolved, log: Callable[[str], None]) -> None:
    """A part to redo: its folder renamed (kept until the user removes it), or for a failures
    part, its command told to start over (it replaces its files only once it is done)."""
    if item.part.run == "failures":
        item.argv.append("--fresh")
        return
    if item.run_dir.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = item.run_dir.with_name(f"{item.run_dir.name}.replaced-{stamp}")
        item.run_dir.rename(aside)
        log(f"[{item.part.name}] --fresh: the earlier run is kept in {aside}")


def run_logged(command: list[str], log_path: Path, timeout_s: float | None) -> int:
    """The command with its output appended to `log_path`; its exit code (124 on time out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=os.environ,
            preexec_fn=_die_with_parent,
        )
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            return 124
        except KeyboardInterrupt:  # stop the part's command too, so it records `interrupted`
            process.terminate()
            process.wait()
            raise


def _die_with_parent() -> None:
    """In the part's process before it starts: SIGTERM when the runner dies, however it dies
    (SIGKILL included), so a part never outlives its runner; SIGTERM lets the command stop its
    servers and record `interrupted`, and a rerun resumes it."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _save_state(
    root: Path, experiment: Experiment, source: Path, outcome: Outcome, wall_s: float
) -> None:
    """EXP/experiment.json: the experiment as run and each part's last outcome (earlier runs'
    outcomes of parts not run now are kept)."""
    path = root / STATE_FILE
    earlier: dict[str, Any] = {}
    if path.is_file():
        try:
            earlier = json.loads(path.read_text()).get("parts", {})
        except (OSError, json.JSONDecodeError):
            earlier = {}
    parts = dict(earlier)
    for part in outcome.parts:
        if part.status == "done" and part.name in parts:
            continue  # keep the run that finished it (its wall time)
        parts[part.name] = asdict(part)
    write_json_atomic(
        path,
        {
            "name": experiment.name,
            "source": str(source),
            "experiment": experiment.model_dump(mode="json"),
            "parts": parts,
            "last_wall_s": round(wall_s, 1),
        },
    )


def read_state(root: Path) -> dict[str, Any]:
    path = root / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
