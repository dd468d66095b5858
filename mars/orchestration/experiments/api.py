"""`mars.orchestration.experiments.api.experiment`: a paper's experiment (its training runs, the
evaluation of every checkpoint, the report) run as the ordinary `mars` commands, one run directory
per part. `mars experiment` parses its options into an `ExperimentPlan` and calls `experiment`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mars.api.plans import build_plan, loggers, names


@dataclasses.dataclass(frozen=True)
class ExperimentPlan:
    """What `mars experiment` runs: `name` a shipped experiment (marshal, marshal-mini,
    stronger-mas, stronger-mas-mini) or an experiment YAML file; `sets` its variables
    ({"steps": 40}, or `KEY=VALUE` items); `only` the parts to run, `fresh` those to redo from
    scratch (their folders set aside); `dry_run` checks every part and runs nothing;
    `report_only` writes the report from what has run; `starts` builds the starting models the
    parts use and runs no part (with `dry_run`: says which are built, builds none)."""

    name: str
    sets: Mapping[str, Any] | Sequence[str] = dataclasses.field(default_factory=dict)
    out: Path = Path("runs/experiments")
    run_dir: Path | None = None
    only: str | Sequence[str] | None = None
    fresh: str | Sequence[str] | None = None
    dry_run: bool = False
    report_only: bool = False
    logger: str | Sequence[str] | None = None  # trackers of every training and loop part
    starts: bool = False


@dataclasses.dataclass(frozen=True)
class ExperimentResult:
    """The experiment's folder (`run_dir`), each part's last recorded status (done, completed,
    unscored, failed, blocked; `not run` for one never run), the report's markdown (`report`,
    written to `report_path`; empty after a dry run), the dry run's line per part (`checked`),
    each starting model's folder (`starts`, after `starts=True`) and the exit code the command
    ends with (the first failed part's; 0 when none failed)."""

    name: str
    run_dir: Path
    parts: dict[str, str]
    report: str = ""
    report_path: Path | None = None
    checked: tuple[str, ...] = ()
    wall_s: float | None = None
    exit_code: int = 0
    starts: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [name for name, status in self.parts.items() if status in ("failed", "blocked")]


def experiment(plan: ExperimentPlan | None = None, /, **kwargs: Any) -> ExperimentResult:
    """Run `plan` (or the plan the keyword arguments build): every part as its `mars` command,
    the finished ones skipped, the unfinished resumed, then the report."""
    from mars.orchestration.experiments import load_experiment, parse_sets

    plan = build_plan(ExperimentPlan, plan, kwargs)
    sets = plan.sets if isinstance(plan.sets, Mapping) else parse_sets(list(plan.sets))
    loaded = load_experiment(plan.name, dict(sets))
    chosen_loggers = loggers(plan.logger)
    if chosen_loggers is not None:
        loaded = loaded.model_copy(update={"logger": list(chosen_loggers)})
    root = (plan.run_dir or Path(plan.out) / loaded.name).expanduser().resolve()
    chosen = list(names(plan.only, "--only")) if plan.only else None
    redo = list(names(plan.fresh, "--fresh")) if plan.fresh else []
    for part in [*(chosen or []), *redo]:
        loaded.part(part)  # an unknown name: one line
    if plan.starts:
        return _starts(loaded, root, build=not plan.dry_run)
    if plan.dry_run:
        return _dry_run(loaded, root)
    wall_s, exit_code = None, 0
    if not plan.report_only:
        wall_s, exit_code = _run(loaded, root, plan, chosen, redo)
    return _report(loaded, root, wall_s, exit_code)


def _dry_run(loaded: Any, root: Path) -> ExperimentResult:
    from mars.orchestration.experiments.check import check_experiment

    lines = check_experiment(loaded, root)
    print("\n".join(lines))
    print(f"dry run: {len(lines)} parts checked; nothing run ({root})")
    return ExperimentResult(loaded.name, root, _statuses(loaded, root), checked=tuple(lines))


def _starts(loaded: Any, root: Path, *, build: bool) -> ExperimentResult:
    """Each starting model the parts use, built (`build`) or said to be built or not."""
    import time

    from mars.orchestration.experiments.parts import (
        build_start,
        build_starts_side_by_side,
        start_state,
        starts_used,
    )

    if build:
        started = time.perf_counter()
        side_by_side = build_starts_side_by_side(loaded, root)
        if side_by_side:
            took = time.perf_counter() - started
            print(f"starts {', '.join(side_by_side)}: built side by side in {took:.0f}s")
    folders: dict[str, Path] = {}
    for key in starts_used(loaded, root):
        folder, built = start_state(loaded, key)
        if build and not built:
            print(f"start {key}: building into {folder} ...", flush=True)
            started = time.perf_counter()
            folder = build_start(loaded, key)
            print(f"start {key}: built in {time.perf_counter() - started:.0f}s  {folder}")
        else:
            print(f"start {key}: {'built' if built else 'not built'}  {folder}")
        folders[key] = folder
    return ExperimentResult(loaded.name, root, _statuses(loaded, root), starts=folders)


def _run(
    loaded: Any, root: Path, plan: ExperimentPlan, chosen: list[str] | None, redo: list[str]
) -> tuple[float, int]:
    """Run the parts; the wall time and the exit code (the first failed part's, else 0)."""
    from mars.orchestration.experiments import run_experiment
    from mars.orchestration.experiments.spec import experiment_path

    outcome = run_experiment(
        loaded, root, source=experiment_path(plan.name), only=chosen, fresh=redo, log=print
    )
    print(f"experiment {loaded.name}: {outcome.wall_s / 60:.1f} min")
    if not outcome.failed:
        return outcome.wall_s, 0
    codes = [p.exit_code for p in outcome.parts if p.exit_code]
    return outcome.wall_s, codes[0] if codes else 1


def _report(loaded: Any, root: Path, wall_s: float | None, exit_code: int) -> ExperimentResult:
    from mars.orchestration.experiments import write_report

    path = write_report(loaded, root)
    print(f"report: {path}")
    print(f"run dir: {root}")
    return ExperimentResult(
        name=loaded.name,
        run_dir=root,
        parts=_statuses(loaded, root),
        report=path.read_text(encoding="utf-8"),
        report_path=path,
        wall_s=wall_s,
        exit_code=exit_code,
    )


def _statuses(loaded: Any, root: Path) -> dict[str, str]:
    """Each part's last recorded outcome (EXP/experiment.json), `not run` if it has none."""
    from mars.orchestration.experiments.runner import read_state

    recorded = read_state(root).get("parts") or {}
    return {
        part.name: (recorded.get(part.name) or {}).get("status", "not run") for part in loaded.parts
    }
