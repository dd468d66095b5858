"""What an API function returns: the run folder, its summary figures with their intervals, and
a reader of its records. Every figure is read back from the files the run wrote, so a result
returned in a notebook and a run opened later (`open_run`) are the same thing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError

if TYPE_CHECKING:
    from core.lifecycle import RunLifecycle


LOOP_CURVE = "learning_curve.jsonl"  # a loop's rows, one per step (mars.orchestration.loop.curve)


@dataclasses.dataclass(frozen=True)
class Figure:
    """One summary figure: its value (None: no score), 95% interval and sample count."""

    value: float | None
    ci95: tuple[float, float] | None = None
    n: int | None = None

    def __str__(self) -> str:
        if self.value is None:
            return "no score"
        interval = f" [{self.ci95[0]:.3f}, {self.ci95[1]:.3f}]" if self.ci95 else ""
        count = f" (n={self.n})" if self.n is not None else ""
        return f"{self.value:.3f}{interval}{count}"


@dataclasses.dataclass(frozen=True)
class RunResult:
    """A finished run: `figures` names each headline figure (e.g. `gsm8k` for an eval's suite,
    `seat first` for an arena seat); `summary` is summary.json as written; `records()` reads the
    run's records (each attempt once); `unscored` holds a line per suite or seat with no score
    (the command line exits with code 4 on any)."""

    kind: str
    run_dir: Path
    summary: dict[str, Any]
    figures: dict[str, Figure]
    unscored: tuple[str, ...] = ()
    record_key: Callable[[dict[str, Any]], Hashable] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def records(self) -> list[dict[str, Any]]:
        from core.runstore import RunDir

        run = RunDir(self.run_dir, self.kind)
        return run.unique_records(self.record_key) if self.record_key else run.records()

    def records_frame(self) -> Any:
        """The records as a pandas DataFrame (pandas is a dependency of the dashboard)."""
        import pandas

        return pandas.DataFrame(self.records())


def _interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2 and None not in value:
        return (float(value[0]), float(value[1]))
    return None


def eval_figures(summary: dict[str, Any]) -> dict[str, Figure]:
    """An eval's accuracy per suite."""
    return {
        suite: Figure(stats.get("accuracy"), _interval(stats.get("ci95")), stats.get("n"))
        for suite, stats in (summary.get("suites") or {}).items()
    }


def arena_figures(summary: dict[str, Any]) -> dict[str, Figure]:
    """An arena's mean return per seat of the player (`seat first`, `seat second`)."""
    return {
        f"seat {seat}": Figure(
            stats.get("mean_return"), _interval(stats.get("mean_return_ci")), stats.get("n")
        )
        for seat, stats in (summary.get("seats") or {}).items()
    }


def selfplay_figures(summary: dict[str, Any]) -> dict[str, Figure]:
    """A self-play run's mean return per game and seat (`kuhn_poker seat first`); no score for
    a game whose every episode failed."""
    from games.episode import SEAT_NAMES

    return {
        f"{game} seat {seat}": Figure(
            stats["mean_return"][index] if stats.get("episodes") else None,
            None,
            stats.get("episodes"),
        )
        for game, stats in (summary.get("games") or {}).items()
        for index, seat in enumerate(SEAT_NAMES)
    }


def exploitability_figures(summary: dict[str, Any]) -> dict[str, Figure]:
    """A policy's exploitability and NashConv, with their bootstrap intervals."""
    samples = summary.get("samples")
    return {
        "exploitability": Figure(
            summary.get("exploitability"), _interval(summary.get("ci95")), samples
        ),
        "nash_conv": Figure(
            summary.get("nash_conv"), _interval(summary.get("nash_conv_ci95")), samples
        ),
    }


def finished_run(
    life: RunLifecycle,
    kind: str,
    summary: dict[str, Any],
    figures: Callable[[dict[str, Any]], dict[str, Figure]],
    unscored: Iterable[str] = (),
    record_key: Callable[[dict[str, Any]], Hashable] | None = None,
) -> RunResult:
    """The result of the run `life` just ended: its summary.json as written (with its schema
    version), else `summary`, and the figures read from it."""
    summary = life.run.summary() or summary
    return RunResult(
        kind=kind,
        run_dir=life.path,
        summary=summary,
        figures=figures(summary),
        unscored=tuple(unscored),
        record_key=record_key,
    )


def read_result(run_dir: Path, kind: str, figures: Callable[[dict[str, Any]], dict[str, Figure]]):
    """A RunResult from a run folder's summary.json (MarsError if it has none)."""
    from core.runstore import RunDir

    summary = RunDir(run_dir, kind).summary()
    if summary is None:
        raise MarsError(f"{run_dir} has no summary.json: the run did not finish")
    return RunResult(kind=kind, run_dir=run_dir, summary=summary, figures=figures(summary))


def open_run(run_dir: str | Path) -> RunResult:
    """A finished run's result, whatever command wrote it (its kind is in run.json)."""
    from core.runstore import RunDir

    path = Path(run_dir)
    if not path.is_dir():
        raise MarsError(f"{path} is not a run folder")
    kind = RunDir.read_info(path).kind
    if kind == "train":  # its figures are in metrics.jsonl, and verl writes no summary.json
        return read_train(path)
    if kind == "loop":  # its figures are the learning curve's rows
        return read_loop(path)
    readers = {
        "eval": eval_figures,
        "arena": arena_figures,
        "selfplay": selfplay_figures,
        "exploitability": exploitability_figures,
    }
    result = read_result(path, kind, readers.get(kind, plain_figures))
    return dataclasses.replace(result, record_key=_record_key(kind))


def _record_key(kind: str) -> Callable[[dict[str, Any]], Hashable] | None:
    """What makes one attempt of a run of `kind` (a redone one is read once), as the command
    that wrote the run resumes by it."""
    if kind == "eval":
        from harness.evaluation import record_key

        return record_key
    if kind == "arena":
        from games.arena import record_key as episode_key

        return episode_key
    if kind == "selfplay":
        from games.selfplay import selfplay_key

        return selfplay_key
    if kind == "exploitability":
        from mars.api.exploitability import record_key as state_key

        return state_key
    return None


def read_loop(path: Path) -> RunResult:
    """A loop's run folder: its summary and its learning curve's rows as figures."""
    from core.files import read_jsonl
    from core.runstore import RunDir

    rows = read_jsonl(path / LOOP_CURVE).rows if (path / LOOP_CURVE).is_file() else []
    summary = RunDir(path, "loop").summary() or {}
    return RunResult(kind="loop", run_dir=path, summary=summary, figures=curve_figures(rows))


def plain_figures(summary: dict[str, Any]) -> dict[str, Figure]:
    """Top-level numbers of a summary (exploitability, training), each without an interval
    unless the summary writes `NAME_ci95` beside it."""
    figures = {}
    for key, value in summary.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            figures[key] = Figure(float(value), _interval(summary.get(f"{key}_ci95")))
    return figures


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounds(row: dict[str, Any], low: str, high: str) -> tuple[float, float] | None:
    return _interval([row.get(low), row.get(high)])


def _evaluation(row: dict[str, Any]) -> dict[str, Figure]:
    """One metrics row's in-training evaluation: a game's win rate per opponent and seat
    (`eval/GAME/OPPONENT/SEAT/win`), an exploitability (`exploitability/GAME`), a MAS run's
    held-out accuracy (`eval/accuracy`), each with its 95% interval."""
    figures = {}
    for key, value in row.items():
        if not _number(value):
            continue
        if key.startswith("eval/") and key.endswith("/win"):
            prefix = key.removesuffix("/win")
            interval = _bounds(row, f"{prefix}/ci95_low", f"{prefix}/ci95_high")
            figures[key] = Figure(float(value), interval, row.get(f"{prefix}/n"))
        elif key.startswith("exploitability/") and key.count("/") == 1:
            interval = _bounds(row, f"{key}/ci95_low", f"{key}/ci95_high")
            figures[key] = Figure(float(value), interval)
        elif key == "eval/accuracy":
            interval = _bounds(row, f"{key}_ci95_low", f"{key}_ci95_high")
            figures[key] = Figure(float(value), interval, row.get("eval/n"))
    return figures


def train_figures(rows: list[dict[str, Any]]) -> dict[str, Figure]:
    """A training run's figures from its metrics rows: every number of the last row (`step`,
    `loss`, `reward_mean`, ...) but its evaluation's, then the last in-training evaluation
    (`_evaluation`, from whichever row last had one) and the step it was made at
    (`evaluation_step`)."""
    if not rows:
        return {}
    figures = {
        key: Figure(float(value))
        for key, value in rows[-1].items()
        if _number(value) and not key.startswith(("eval/", "exploitability/"))
    }
    for row in reversed(rows):
        evaluation = _evaluation(row)
        if evaluation:
            step = float(row["step"]) if _number(row.get("step")) else None
            return figures | {"evaluation_step": Figure(step)} | evaluation
    return figures


def read_train(run_dir: Path) -> RunResult:
    """A training run's result: summary.json as written ({} where none is: a verl run, a run
    cut short) and the figures of its metrics.jsonl (verl's own, RUN/verl/metrics.jsonl, for a
    verl run)."""
    from core.files import read_jsonl
    from core.runstore import RunDir

    path = Path(run_dir)
    summary = RunDir(path, "train").summary() or {}
    own, verl = path / "metrics.jsonl", path / "verl" / "metrics.jsonl"
    rows = read_jsonl(own if own.is_file() or not verl.is_file() else verl).rows
    return RunResult(kind="train", run_dir=path, summary=summary, figures=train_figures(rows))


def _entry_figure(entry: dict[str, Any]) -> Figure:
    """A suite's accuracy, an exploitability or a rating, with its 95% interval."""
    kind = entry.get("kind")
    name, count = {
        "exploit": ("exploitability", "samples"),
        "rating": ("rating", "games"),
    }.get(kind, ("accuracy", "n"))
    value = entry.get(name)
    return Figure(
        None if entry.get("error") or value is None else float(value),
        _interval(entry.get("ci95")),
        entry.get(count),
    )


def curve_figures(rows: list[dict[str, Any]]) -> dict[str, Figure]:
    """The learning curve as figures, one per step and evaluation: `step_N/KEY` (a suite's
    accuracy, an exploitability, a rating) or `step_N/KEY/SEAT` (an arena seat's normalized
    return), each with its 95% interval; no score where the evaluation failed."""
    figures: dict[str, Figure] = {}
    for row in rows:
        step = f"step_{row['step']}"
        if row.get("error") and not row.get("evals"):
            figures[step] = Figure(None)
        for key, entry in (row.get("evals") or {}).items():
            seats = entry.get("seats")
            if entry.get("kind") != "arena" or not isinstance(seats, dict):
                figures[f"{step}/{key}"] = _entry_figure(entry)
                continue
            for seat, stats in seats.items():
                value = None if entry.get("error") else stats.get("normalized_return")
                figures[f"{step}/{key}/{seat}"] = Figure(
                    value, _interval(stats.get("normalized_return_ci")), stats.get("n")
                )
    return figures
