"""`mars loop`: evaluate each new training checkpoint and keep a learning curve.

The work is in `mars.orchestration.loop` (imported inside the command: harness does not import
train_backend at module level). See docs/loop.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from core.names import counted
from mars.commands import options
from mars.commands.app import app

EVAL_HELP = (
    "What to run on each checkpoint: a YAML/JSON file, or inline items separated by commas: "
    "arena:GAME:OPPONENT:EPISODES (e.g. arena:tic_tac_toe:mcts:100:20), "
    "eval:SUITE[:MAS[:LIMIT]] (e.g. eval:gsm8k:single:5), "
    "exploit:GAME[:SAMPLES] (e.g. exploit:kuhn_poker:16) and "
    "rating:GAME:EPISODES[:PREVIOUS] (e.g. rating:tic_tac_toe:10:2: the checkpoint's rating "
    "against random and the 2 latest earlier checkpoints)."
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


def _describe(row: dict[str, Any]) -> str:
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


@app.command("loop")
def loop_command(
    watch: Path = typer.Option(
        ..., "--watch", help="Folder of step_N/ checkpoints (or a training run holding one)."
    ),
    eval_spec: str = typer.Option(..., "--eval", help=EVAL_HELP),
    once: bool = typer.Option(False, "--once", help="Evaluate what is there now and exit."),
    poll: float = typer.Option(30.0, "--poll", min=0.1, help="Seconds between looks."),
    timeout: float = typer.Option(
        86_400.0, "--timeout", min=0.0, help="Stop polling after this many seconds."
    ),
    prompt_style: str = typer.Option(
        None, "--prompt-style", help="Arena prompts: full | compact (default: the checkpoint's)."
    ),
    max_tokens: int = typer.Option(
        None, "--max-tokens", min=1, help="New tokens per reply (default: the checkpoint's)."
    ),
    temperature: float = typer.Option(None, "--temperature", min=0.0, help="Default 0."),
    concurrency: int = typer.Option(None, "--concurrency", min=1, help="Default 16."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Local benchmark files for eval."),
    baseline: Path = typer.Option(
        None, "--baseline", help="Also evaluate this model folder as step 0 (where training began)."
    ),
    backend: str = typer.Option(
        "auto", "--backend", help="Server for each checkpoint: auto | vllm | transformers."
    ),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
) -> None:
    """Serve every new complete checkpoint, run the evaluations, append a learning-curve row."""
    from core.lifecycle import run_lifecycle
    from core.runstore import RunStatus, identity_of
    from mars.orchestration.loop import check_spec, parse_spec, run_loop, write_curve

    spec = parse_spec(
        eval_spec,
        prompt_style=prompt_style,
        max_tokens=max_tokens,
        temperature=temperature,
        concurrency=concurrency,
        data_dir=str(data_dir) if data_dir is not None else None,
    )
    check_spec(spec)
    _check_mas_names(spec)
    watch = watch.expanduser().resolve()
    if once and not watch.is_dir():
        raise MarsError(f"--watch {watch} is not a folder")
    _refuse_runs_without_checkpoints(watch)
    if baseline is not None:
        baseline = baseline.expanduser().resolve()
        if not (baseline / "config.json").is_file():
            raise MarsError(f"--baseline {baseline} is not a model folder (no config.json)")
    config = {
        "watch": str(watch),
        "spec": spec.model_dump(),
        "once": once,
        "poll_s": poll,
        "timeout_s": timeout,
        "backend": backend,
        "baseline": str(baseline) if baseline is not None else None,
    }
    # How long to watch and how often to look may change between attempts; what is evaluated not.
    identity = identity_of("loop", config, resumable=("once", "poll_s", "timeout_s"))
    with run_lifecycle(
        out=out, run_dir=run_dir, kind="loop", slug=watch.name, identity=identity
    ) as life:
        run = life.run
        life.start(config=config)
        typer.echo(f"watching {watch}; learning curve in {run.path}")
        try:
            outcome = run_loop(
                watch,
                spec,
                run,
                once=once,
                poll_s=poll,
                timeout_s=timeout,
                backend=backend,
                baseline=baseline,
                on_row=lambda row: typer.echo(_describe(row)),
                on_wait=typer.echo,
            )
        finally:
            rows = write_curve(run)  # the rows so far, also when interrupted
        errors = sum(1 for row in rows if row.get("error"))
        run.write_summary(
            {
                "steps": [row["step"] for row in rows],
                "evaluated_now": outcome.evaluated,
                "skipped": outcome.skipped,
                "error_steps": [row["step"] for row in rows if row.get("error")],
                "stop_reason": outcome.stop_reason,
            }
        )
        life.finish(RunStatus.after(errors))
    typer.echo(
        f"{counted(len(outcome.evaluated), 'checkpoint')} evaluated, "
        f"{len(outcome.skipped)} already done, "
        f"{errors} with errors ({outcome.stop_reason})"
    )
    typer.echo(f"run dir: {run.path}")


def _check_mas_names(spec: Any) -> None:
    from mars.orchestration.loop import SuiteItem
    from mas.base import get_mas

    for item in spec.evals:
        if isinstance(item, SuiteItem):
            get_mas(item.mas)
