"""`mars.orchestration.loop.api.loop`: evaluate each new training checkpoint and keep a learning
curve (docs/loop.md). `mars loop` parses its options into a `LoopPlan` and calls `loop`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.names import counted
from mars.api.plans import build_plan, loggers
from mars.api.results import RunResult, curve_figures


@dataclasses.dataclass(frozen=True)
class LoopPlan:
    """What `mars loop` runs: `evals` is the `--eval` spec (a YAML/JSON file, or inline items
    such as `arena:tic_tac_toe:random:20`, as text or a list); `poll_s` the wait between looks,
    `timeout_s` how long to keep polling (the command's --poll and --timeout). A setting left
    None is the checkpoint's or the spec's."""

    watch: Path
    evals: str | Sequence[str]
    once: bool = False
    poll_s: float = 30.0
    timeout_s: float = 86_400.0
    prompt_style: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    concurrency: int | None = None
    data_dir: Path | None = None
    baseline: Path | None = None
    backend: str = "auto"
    out: Path = Path("runs")
    run_dir: Path | None = None
    logger: str | Sequence[str] | None = None  # trackers of the curve's rows


def loop(plan: LoopPlan | None = None, /, **kwargs: Any) -> RunResult:
    """Serve every new complete checkpoint, run the evaluations, append a learning-curve row;
    the loop's run folder, its summary and its rows as figures (`curve_figures`). A rerun into
    the same run folder skips the steps that have a good row."""
    from core.lifecycle import run_lifecycle
    from core.runstore import RunStatus, identity_of

    plan = build_plan(LoopPlan, plan, kwargs)
    spec, watch, baseline = _prepare(plan)
    config = {
        "watch": str(watch),
        "spec": spec.model_dump(),
        "once": plan.once,
        "poll_s": plan.poll_s,
        "timeout_s": plan.timeout_s,
        "backend": plan.backend,
        "baseline": str(baseline) if baseline is not None else None,
        "logger": list(loggers(plan.logger) or ()),
    }
    # How long to watch and how often to look may change between attempts; what is evaluated not.
    identity = identity_of("loop", config, resumable=("once", "poll_s", "timeout_s", "logger"))
    with run_lifecycle(
        out=plan.out, run_dir=plan.run_dir, kind="loop", slug=watch.name, identity=identity
    ) as life:
        life.start(config=config)
        print(f"watching {watch}; learning curve in {life.run.path}")
        rows, outcome = _watch(plan, spec, watch, baseline, life.run)
        errors = sum(1 for row in rows if row.get("error"))
        summary = {
            "steps": [row["step"] for row in rows],
            "evaluated_now": outcome.evaluated,
            "skipped": outcome.skipped,
            "error_steps": [row["step"] for row in rows if row.get("error")],
            "stop_reason": outcome.stop_reason,
        }
        life.run.write_summary(summary)
        life.finish(RunStatus.after(errors))
    print(
        f"{counted(len(outcome.evaluated), 'checkpoint')} evaluated, "
        f"{len(outcome.skipped)} already done, "
        f"{errors} with errors ({outcome.stop_reason})"
    )
    print(f"run dir: {life.run.path}")
    return RunResult(kind="loop", run_dir=life.path, summary=summary, figures=curve_figures(rows))


def _prepare(plan: LoopPlan) -> tuple[Any, Path, Path | None]:
    """The spec, the watched folder and the baseline, checked before any folder is made."""
    from mars.orchestration.loop import check_spec, parse_spec

    evals = plan.evals if isinstance(plan.evals, str) else ",".join(plan.evals)
    spec = parse_spec(
        evals,
        prompt_style=plan.prompt_style,
        max_tokens=plan.max_tokens,
        temperature=plan.temperature,
        concurrency=plan.concurrency,
        data_dir=str(plan.data_dir) if plan.data_dir is not None else None,
    )
    check_spec(spec)
    _check_mas_names(spec)
    watch = Path(plan.watch).expanduser().resolve()
    if plan.once and not watch.is_dir():
        raise MarsError(f"--watch {watch} is not a folder")
    _refuse_runs_without_checkpoints(watch)
    baseline = plan.baseline
    if baseline is not None:
        baseline = Path(baseline).expanduser().resolve()
        if not (baseline / "config.json").is_file():
            raise MarsError(f"--baseline {baseline} is not a model folder (no config.json)")
    return spec, watch, baseline


def _watch(
    plan: LoopPlan, spec: Any, watch: Path, baseline: Path | None, run: Any
) -> tuple[list[dict[str, Any]], Any]:
    """Run the loop; the learning curve's rows (written also when interrupted) and its outcome."""
    from mars.orchestration.loop import run_loop, write_curve

    try:
        outcome = run_loop(
            watch,
            spec,
            run,
            once=plan.once,
            poll_s=plan.poll_s,
            timeout_s=plan.timeout_s,
            backend=plan.backend,
            baseline=baseline,
            on_row=lambda row: print(describe_row(row)),
            on_wait=print,
            logger=tuple(loggers(plan.logger) or ()),
        )
    finally:
        rows = write_curve(run)  # the rows so far, also when interrupted
    return rows, outcome


def _check_mas_names(spec: Any) -> None:
    from mars.orchestration.loop import SuiteItem
    from mas.base import get_mas

    for item in spec.evals:
        if isinstance(item, SuiteItem):
            get_mas(item.mas)


def _refuse_runs_without_checkpoints(watch: Path) -> None:
    """A run folder of a kind that never writes checkpoints (an eval, an arena) would be watched
    for nothing: "0 checkpoints evaluated" and exit 0."""
    from core.names import a_run_of
    from core.runstore import RUN_FILE, RunDir

    if not (watch / RUN_FILE).is_file():
        return
    kind = RunDir.read_info(watch).kind
    if kind in ("eval", "arena", "selfplay", "exploitability", "loop"):
        raise MarsError(
            f"--watch {watch} holds {a_run_of(kind)}, which writes no checkpoints; watch a "
            "training run (mars train, mars train-mas) or a folder of step_N/ checkpoints"
        )


def _arena_seat(game: str, seat: str, stats: dict[str, Any]) -> str:
    from games.spec import get_game

    # One shared score: win/draw/loss would call every game short of a perfect score a loss.
    if get_game(game).cooperative:
        return f"{seat} score {stats['mean_return']:.2f}"
    return (
        f"{seat} W/D/L {stats['win']:.2f}/{stats['draw']:.2f}/{stats['loss']:.2f}"
        f" norm {stats['normalized_return']:.1f}"
    )


def describe_row(row: dict[str, Any]) -> str:
    """A learning-curve row as the one line `mars loop` prints for it."""
    parts = [f"step {row['step']}:"]
    if row.get("error") and not row.get("evals"):
        return f"step {row['step']}: ERROR {row['error']}"
    for key, entry in row["evals"].items():
        if entry.get("error"):
            parts.append(f"{key} ERROR")
        elif entry["kind"] == "arena":
            seats = " ".join(
                _arena_seat(entry["game"], seat, s) for seat, s in entry["seats"].items()
            )
            parts.append(f"{key} [{seats}]")
        elif entry["kind"] == "rating" and entry.get("rating") is not None:
            low, high = entry["ci95"]
            interval = "" if low is None else f" [{low:.0f}, {high:.0f}]"
            parts.append(
                f"{key} {entry['rating']:.0f}{interval} "
                f"(#{entry['rank']} of {entry['players']}, {entry['games']} games)"
            )
        elif entry["kind"] == "exploit":
            low, high = entry["ci95"]
            parts.append(
                f"{key} exploitability {entry['exploitability']:.3f} [{low:.3f}, {high:.3f}]"
                f" NashConv {entry['nash_conv']:.3f} invalid {entry['invalid_rate']:.2f}"
            )
        else:
            parts.append(f"{key} acc {entry['accuracy']:.3f} (n={entry['n']})")
    return "  ".join(parts)
