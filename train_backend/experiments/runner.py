"""Run an experiment's parts in order, each as its `mars` command in a subprocess; resume.

A finished part is skipped; an unfinished one is rerun with the same command line, which the
command resumes itself (recorded work kept). A part that fails is retried `retries` times; if
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

from core.errors import ExitCode
from core.files import write_json_atomic
from train_backend.experiments.parts import LOGS, PartState, Resolved, part_state, resolve_parts
from train_backend.experiments.spec import Experiment, part_references

STATE_FILE = "experiment.json"


@dataclass
class PartOutcome:
    name: str
    status: str  # done (skipped), completed, unscored, failed, blocked
    wall_s: float = 0.0
    attempts: int = 0
    exit_code: int | None = None
    log: str | None = None


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
    log: Callable[[str], None] = print,
    runner: Callable[[list[str], Path, float | None], int] | None = None,
) -> Outcome:
    """Every part (or those of `only`) in order; the state in EXP/experiment.json."""
    run = runner or run_logged
    root.mkdir(parents=True, exist_ok=True)
    resolved = resolve_parts(experiment, root, build=True)
    outcome = Outcome()
    broken: set[str] = set()
    start = time.monotonic()
    for item in resolved:
        name = item.part.name
        if only and name not in only:
            continue
        blockers = [n for n in part_references(item.part) if n in broken]
        if blockers:
            broken.add(name)
            outcome.parts.append(PartOutcome(name, "blocked"))
            log(f"[{name}] blocked: {', '.join(blockers)} failed")
            continue
        if part_state(item) is PartState.DONE:
            outcome.parts.append(PartOutcome(name, "done"))
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
            return PartOutcome(name, status, wall, attempt, code, str(log_path))
        if code in (ExitCode.BAD_INPUT, ExitCode.INTERRUPTED):
            break  # another attempt would fail the same way, or the user stopped it
        log(f"[{name}] exited with {code} (log: {log_path})")
    log(f"[{name}] failed with exit code {code}; see {log_path}")
    wall = round(time.monotonic() - started, 1)
    return PartOutcome(name, "failed", wall, attempt, code, str(log_path))


def run_logged(command: list[str], log_path: Path, timeout_s: float | None) -> int:
    """The command with its output appended to `log_path`; its exit code (124 on time out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ
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
