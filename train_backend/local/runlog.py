"""The training run's logs beside run.json: metrics.jsonl, records.jsonl, evals/step_N.jsonl and
branches/step_N.jsonl.gz (core.branch_log).

A resumed run continues from its last checkpoint, so every line written after that checkpoint
(a step that ran but was never saved) is dropped first: step numbers continue without duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import branch_log
from core.files import read_jsonl, write_jsonl_atomic

if TYPE_CHECKING:
    from core.runstore import RunDir

METRICS_FILE = "metrics.jsonl"
EVALS_DIR = "evals"


def metrics_path(run_path: Path) -> Path:
    return Path(run_path) / METRICS_FILE


def eval_records_path(run_path: Path, step: int) -> Path:
    return Path(run_path) / EVALS_DIR / f"step_{step}.jsonl"


def append_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every well-formed JSON object line; a line cut short by a kill is skipped."""
    return read_jsonl(path).rows


def _keep_until(path: Path, step: int) -> None:
    if not path.exists():
        return
    kept = [row for row in read_lines(path) if _step_of(row) is not None and _step_of(row) <= step]
    write_jsonl_atomic(path, kept)


def _step_of(row: dict[str, Any]) -> int | None:
    value = row.get("step")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def truncate_after(run_path: Path, step: int, records_path: Path) -> None:
    """Drop metrics, self-play records, eval records and branch logs of steps after `step`."""
    branch_log.remove_after(run_path, step)
    _keep_until(metrics_path(run_path), step)
    _keep_until(records_path, step)
    evals = Path(run_path) / EVALS_DIR
    if evals.is_dir():
        for child in evals.glob("step_*.jsonl"):
            number = child.stem.removeprefix("step_")
            if number.isdigit() and int(number) > step:
                child.unlink()


def training_identity(config: dict[str, Any]) -> dict[str, Any]:
    """What a training run may not change when it resumes: everything but how many steps it
    runs, how often it saves, (a MAS run) which policies are frozen and when they take turns, and
    which trackers get its metrics: those decide what the next steps do, not what the steps made
    so far mean."""
    from core.runstore import identity_of

    return identity_of("train", config, resumable=RESUMABLE_SETTINGS)


RESUMABLE_SETTINGS = (
    "steps",
    "save_every",
    "frozen_policies",
    "phase_alternate_steps",
    "logger",
)


def train_recorded(
    run: RunDir,
    train: Callable[[], dict[str, Any]],
    *,
    command: list[str],
    config: dict[str, Any],
    model: str,
    seed: int,
) -> dict[str, Any]:
    """Mark `run` started, run `train`, then mark it completed (interrupted on Ctrl-C, failed on
    an error)."""
    from core.runstore import RunStatus

    run.start(
        command=command,
        config=config,
        model=model,
        seeds={"seed": seed},
        identity=training_identity(config),
    )
    try:
        summary = train()
    except KeyboardInterrupt:
        run.finish(RunStatus.INTERRUPTED)
        raise
    except Exception:
        run.finish(RunStatus.FAILED)
        raise
    run.finish(RunStatus.COMPLETED)
    return summary


def train_tracked(
    run: RunDir, trainer: Any, config: Any, *, command: list[str], model: str
) -> dict[str, Any]:
    """`train_recorded` of a loaded trainer (its `train`, `start_step` and `trackers`), with the
    trackers `config.logger` names open for the run: each metrics row goes to them too."""
    from core.trackers import open_trackers

    settings = config.model_dump(mode="json")
    with open_trackers(
        config.logger, run.path, settings, resume_step=trainer.start_step
    ) as trackers:
        trainer.trackers = trackers
        return train_recorded(
            run, trainer.train, command=command, config=settings, model=model, seed=config.seed
        )
