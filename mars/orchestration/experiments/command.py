"""`mars experiment NAME|FILE`: a paper's experiment (training runs, the evaluation of every
checkpoint, the report) run as the ordinary `mars` commands, one run directory per part
(`mars.orchestration.experiments.api`).
"""

from __future__ import annotations

from pathlib import Path

import typer

from mars.commands.app import app
from mars.commands.logger_option import LOGGER


@app.command("experiment")
def experiment_command(
    name: str = typer.Argument(
        None,
        help="A shipped experiment (marshal, marshal-mini, stronger-mas, stronger-mas-mini) "
        "or an experiment YAML file.",
    ),
    out: Path = typer.Option(
        Path("runs/experiments"), "--out", help="Parent folder of the experiment's folder."
    ),
    run_dir: Path = typer.Option(
        None, "--run-dir", help="Exactly this experiment folder (default: OUT/NAME); reruns resume."
    ),
    sets: list[str] = typer.Option(
        None, "--set", help="KEY=VALUE: a variable of the experiment file (repeatable)."
    ),
    only: str = typer.Option(None, "--only", help="PART,...: run these parts only."),
    fresh: str = typer.Option(
        None,
        "--fresh",
        help="PART,...: redo these parts from scratch (their folders are renamed aside, kept).",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check every part (command line, training config, names); run nothing.",
    ),
    report_only: bool = typer.Option(
        False, "--report", help="Write the report from what has run; run nothing."
    ),
    starts: bool = typer.Option(
        False,
        "--starts",
        help="Build the starting models the parts use (`starts:`, built-in ones); run no part. "
        "With --dry-run: say which are built.",
    ),
    list_parts: bool = typer.Option(False, "--list", help="List the shipped experiments."),
    logger: str = LOGGER,
) -> None:
    """Run a paper's experiment: every part as its `mars` command, resumable, then the report."""
    from mars.orchestration.experiments import recipe_names
    from mars.orchestration.experiments.api import ExperimentPlan, experiment

    if list_parts or name is None:
        typer.echo("\n".join(recipe_names()))
        return
    result = experiment(
        ExperimentPlan(
            name=name,
            sets=sets or [],
            out=out,
            run_dir=run_dir,
            only=only,
            fresh=fresh,
            dry_run=dry_run,
            report_only=report_only,
            logger=logger,
            starts=starts,
        )
    )
    if result.exit_code:
        raise typer.Exit(result.exit_code)
