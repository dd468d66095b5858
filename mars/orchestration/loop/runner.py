"""Running the loop: serve each new checkpoint, run its evaluations, append its row."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.runstore import FINISHED_STATUSES, RUN_FILE, RunDir, RunStatus
from core.trackers import open_trackers
from mars.orchestration.loop.checkpoints import (
    Checkpoint,
    check_mas_spec,
    checkpoints_folder,
    complete_checkpoints,
    mas_checkpoints,
    training_status,
)
from mars.orchestration.loop.commands import Settings, SubCommand, resolve_settings, sub_command
from mars.orchestration.loop.curve import ROW_SCHEMA_VERSION, curve_rows, flatten_row, write_curve
from mars.orchestration.loop.figures import (
    arena_figures,
    exploit_figures,
    rating_figures,
    rating_opponents,
    suite_figures,
)
from mars.orchestration.loop.spec import ArenaItem, ExploitItem, Item, LoopSpec, RatingItem


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_item(item: Item, sub: SubCommand, *, timeout_s: float, log_path: Path) -> dict[str, Any]:
    """Run one evaluation's command (`sub_command`) as a subprocess; its figures, or the error
    that stopped it. The command writes its run directory, `sub.run_dir`."""
    command, run_dir = sub.argv, sub.run_dir
    entry: dict[str, Any] = {**item.model_dump(exclude={"name"}), "run_dir": run_dir.name}
    if sub.prompt_style is not None:
        entry["prompt_style"] = sub.prompt_style
    started = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}", None
    log_path.write_text(f"$ {' '.join(command)}\n{output}")
    entry["wall_s"] = round(time.perf_counter() - started, 2)
    summary_path = run_dir / "summary.json"
    if code != 0 or not summary_path.is_file():
        reason = "timed out" if code is None else f"exit code {code}"
        entry["error"] = f"{item.kind} failed ({reason}): {_last_line(output)}"
        return entry
    summary = json.loads(summary_path.read_text())
    if isinstance(item, ArenaItem | RatingItem):
        entry.update(arena_figures(summary))
    elif isinstance(item, ExploitItem):
        entry.update(exploit_figures(summary))
    else:
        entry.update(suite_figures(summary, item.suite))
    entry["error"] = None
    return entry


def run_rating(
    item: RatingItem,
    checkpoint: Checkpoint,
    spec: LoopSpec,
    settings: Settings,
    *,
    base_url: str,
    model: str,
    loop_dir: Path,
    earlier: list[Checkpoint],
    log_dir: Path,
) -> dict[str, Any]:
    """Play the rating item's matches (one `mars arena` each), then fit the ratings."""
    label = str(checkpoint.path.resolve())
    entry: dict[str, Any] = {**item.model_dump(exclude={"name"}), "player": label, "matches": {}}
    started = time.perf_counter()
    for opponent, suffix in rating_opponents(item, earlier):
        command = sub_command(
            item,
            spec,
            settings,
            base_url=base_url,
            model=model,
            run_dir=loop_dir / f"step_{checkpoint.step}-{item.key}-vs-{suffix}",
            model_label=label,
            opponent=opponent,
        )
        played = run_item(
            item,
            command,
            timeout_s=spec.eval_timeout_s,
            log_path=log_dir / f"{item.key}-{suffix}.log",
        )
        entry["matches"][suffix] = {
            key: played.get(key) for key in ("run_dir", "wall_s", "error")
        } | {"opponent": opponent}
    failed = [suffix for suffix, match in entry["matches"].items() if match["error"]]
    entry.update(rating_figures(item, label, loop_dir))
    entry["wall_s"] = round(time.perf_counter() - started, 2)
    if failed:
        entry["error"] = f"rating matches failed: {', '.join(failed)}"
    entry.setdefault("error", None)
    return entry


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def evaluate_checkpoint(
    checkpoint: Checkpoint,
    spec: LoopSpec,
    loop_dir: Path,
    *,
    backend: str = "auto",
    defaults_from: Checkpoint | None = None,
    earlier: list[Checkpoint] | None = None,
) -> dict[str, Any]:
    """Serve the checkpoint once, run every evaluation against it, and return its curve row.

    `defaults_from`: the checkpoint whose training config gives the default prompt style and
    reply length (a baseline model has none of its own). `earlier`: the checkpoints evaluated
    before, by step (rating items play the latest of them).
    """
    from core.endpoint import GenerationConfig
    from core.model_access import model_endpoint

    started = time.perf_counter()
    settings = resolve_settings(spec, defaults_from or checkpoint)
    info = checkpoint.info()
    metrics = info.get("metrics")
    row: dict[str, Any] = {
        "schema_version": ROW_SCHEMA_VERSION,
        "step": checkpoint.step,
        "checkpoint": str(checkpoint.path.resolve()),
        "evaluated_at": _now(),
        "settings": settings.__dict__,
        "train_metrics": metrics if isinstance(metrics, dict) else None,
        "evals": {},
        "error": None,
    }
    log_dir = loop_dir / "logs" / f"step_{checkpoint.step}"
    log_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint.mas_run is not None:
        return _evaluate_trained_mas(checkpoint, spec, settings, row, loop_dir, log_dir, started)
    gen = GenerationConfig(temperature=settings.temperature, top_p=settings.top_p)
    try:
        with model_endpoint(
            model=str(checkpoint.path.resolve()),
            base_url=None,
            backend=backend,
            log_dir=log_dir,
            gen=gen,
        ) as endpoint:
            # Rating items last: their fit then holds this step's arena games too.
            for item in sorted(spec.evals, key=lambda item: isinstance(item, RatingItem)):
                if isinstance(item, RatingItem):
                    row["evals"][item.key] = run_rating(
                        item,
                        checkpoint,
                        spec,
                        settings,
                        base_url=endpoint.base_url,
                        model=endpoint.model,
                        loop_dir=loop_dir,
                        earlier=list(earlier or []),
                        log_dir=log_dir,
                    )
                    continue
                command = sub_command(
                    item,
                    spec,
                    settings,
                    base_url=endpoint.base_url,
                    model=endpoint.model,
                    run_dir=loop_dir / f"step_{checkpoint.step}-{item.key}",
                    model_label=str(checkpoint.path.resolve()),
                    mas_options=checkpoint.mas_options,
                )
                row["evals"][item.key] = run_item(
                    item,
                    command,
                    timeout_s=spec.eval_timeout_s,
                    log_path=log_dir / f"{item.key}.log",
                )
    except MarsError as exc:  # could not be served (bad folder, server died, warm-up failed)
        row["error"] = f"serving failed: {exc}"
    return _finish_row(row, spec, started)


def _evaluate_trained_mas(
    checkpoint: Checkpoint,
    spec: LoopSpec,
    settings: Settings,
    row: dict[str, Any],
    loop_dir: Path,
    log_dir: Path,
    started: float,
) -> dict[str, Any]:
    """A MAS training step: each eval item is `mars eval --trained RUN --trained-step N`, which
    serves every policy's checkpoint for its roles; the row keeps the role -> checkpoint map."""
    from train_backend.mas.trained import trained_mas

    assert checkpoint.mas_run is not None
    try:
        trained = trained_mas(checkpoint.mas_run, checkpoint.step)
    except MarsError as exc:  # e.g. a policy's checkpoint of this step was removed meanwhile
        row["error"] = str(exc)
        return _finish_row(row, spec, started)
    row["roles"] = {role: str(path.resolve()) for role, path in trained.role_models.items()}
    for item in spec.evals:
        command = sub_command(
            item,
            spec,
            settings,
            base_url="",
            model="",
            run_dir=loop_dir / f"step_{checkpoint.step}-{item.key}",
            trained=(checkpoint.mas_run, checkpoint.step),
        )
        row["evals"][item.key] = run_item(
            item, command, timeout_s=spec.eval_timeout_s, log_path=log_dir / f"{item.key}.log"
        )
    return _finish_row(row, spec, started)


def _finish_row(row: dict[str, Any], spec: LoopSpec, started: float) -> dict[str, Any]:
    failed = [key for key, entry in row["evals"].items() if entry.get("error")]
    if row["error"] is None and failed:
        row["error"] = f"{len(failed)} of {len(spec.evals)} evaluations failed: {', '.join(failed)}"
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def earlier_checkpoints(run: RunDir, step: int) -> list[Checkpoint]:
    """Checkpoints of the curve before `step` that were served and are still on disk, by step."""
    found = []
    for row in curve_rows(run):
        path = Path(str(row.get("checkpoint") or ""))
        served = not str(row.get("error") or "").startswith("serving failed")
        if row["step"] < step and served and (path / "config.json").is_file():
            found.append(Checkpoint(row["step"], path))
    return found


def step_key(record: dict[str, Any]) -> tuple[int]:
    return (int(record["step"]),)


@dataclass
class LoopOutcome:
    evaluated: list[int]  # steps evaluated by this call (errors included)
    skipped: list[int]  # complete steps already in the curve when found
    stop_reason: str


def run_loop(
    watch: Path,
    spec: LoopSpec,
    run: RunDir,
    *,
    once: bool = False,
    poll_s: float = 30.0,
    timeout_s: float = 86_400.0,
    backend: str = "auto",
    baseline: Path | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    logger: Sequence[str] = (),
) -> LoopOutcome:
    """Evaluate every complete checkpoint under `watch` that has no good row yet.

    `baseline`: a model folder (the one training started from) evaluated once as step 0, with the
    prompt style and reply length of the first checkpoint found, so the curve starts where
    training did.

    With `once`, what is there now and return. Otherwise poll every `poll_s` seconds until
    `timeout_s` has passed, or the training run that writes the checkpoints has finished (its
    run.json) and all its checkpoints are evaluated. A step whose evaluation gave an error row is
    not retried within the same call (a rerun retries it).

    `logger`: trackers (core.trackers) that get each row evaluated now, as its learning-curve
    CSV line's figures at its step, with the loop's config (run.json, started by the caller).
    """
    config = run.info().config if run.info_path.is_file() else {}
    with open_trackers(logger, run.path, config, kind="loop") as trackers:

        def tracked(row: dict[str, Any]) -> None:
            trackers.log(flatten_row(row), row["step"])
            if on_row is not None:
                on_row(row)

        return _run_loop(
            watch,
            spec,
            run,
            once=once,
            poll_s=poll_s,
            timeout_s=timeout_s,
            backend=backend,
            baseline=baseline,
            on_row=tracked,
            on_wait=on_wait,
            sleep=sleep,
        )


def _run_loop(
    watch: Path,
    spec: LoopSpec,
    run: RunDir,
    *,
    once: bool,
    poll_s: float,
    timeout_s: float,
    backend: str,
    baseline: Path | None,
    on_row: Callable[[dict[str, Any]], None] | None,
    on_wait: Callable[[str], None] | None,
    sleep: Callable[[float], None],
) -> LoopOutcome:
    from train_backend.mas.trained import mas_training_run

    mas_run = mas_training_run(watch)
    workflow_options: dict[str, Any] = {}
    if mas_run is not None:
        check_mas_spec(spec, mas_run)
        config = json.loads((mas_run / RUN_FILE).read_text())["config"]
        workflow_options = dict(config.get("workflow_options") or {})
    done = {key[0] for key in run.prepare_resume(step_key)}
    write_curve(run)
    deadline = time.monotonic() + timeout_s
    attempted: set[int] = set()
    skipped: list[int] = []
    evaluated: list[int] = []
    announced_missing = False
    while True:
        folder = mas_run or checkpoints_folder(watch)
        if not folder.is_dir() and once:
            raise MarsError(f"--watch {watch} is not a folder")
        if not folder.is_dir() and not announced_missing and on_wait is not None:
            on_wait(f"waiting for {watch} to appear")
            announced_missing = True
        found = mas_checkpoints(mas_run) if mas_run else complete_checkpoints(folder)
        if baseline is not None and 0 not in attempted and (found or once):
            attempted.add(0)
            if 0 in done:
                skipped.append(0)
            else:
                start = Checkpoint(0, baseline)
                if mas_run is not None:  # every role the starting model, the workflow as trained
                    start = Checkpoint(0, baseline, mas_options=workflow_options)
                first = found[0] if found else None
                row = evaluate_checkpoint(
                    start, spec, run.path, backend=backend, defaults_from=first, earlier=[]
                )
                row["baseline"] = True
                run.append(row)
                write_curve(run)
                evaluated.append(0)
                if on_row is not None:
                    on_row(row)
        for checkpoint in found:
            if checkpoint.step in attempted:
                continue
            if checkpoint.step in done:
                attempted.add(checkpoint.step)
                skipped.append(checkpoint.step)
                continue
            attempted.add(checkpoint.step)
            row = evaluate_checkpoint(
                checkpoint,
                spec,
                run.path,
                backend=backend,
                earlier=earlier_checkpoints(run, checkpoint.step),
            )
            run.append(row)
            write_curve(run)
            evaluated.append(checkpoint.step)
            if on_row is not None:
                on_row(row)
        if once:
            return LoopOutcome(evaluated, skipped, "once")
        now = mas_checkpoints(mas_run) if mas_run else complete_checkpoints(folder)
        pending = [c for c in now if c.step not in attempted]
        status = training_status(folder)
        if not pending and status == RunStatus.DRY_RUN:
            return LoopOutcome(evaluated, skipped, "a dry run: nothing was trained")
        if not pending and status in FINISHED_STATUSES:
            return LoopOutcome(evaluated, skipped, "training finished")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return LoopOutcome(evaluated, skipped, "timeout")
        sleep(min(poll_s, remaining))
