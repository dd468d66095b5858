"""`mars experiment NAME|FILE`: a paper's experiment (training runs, the evaluation of every
checkpoint, the report) run as the ordinary `mars` commands, one run directory per part.

The machinery is in `mars.orchestration.experiments`; this module wires in what only the command
line layer sees: the parsers (`mars.command_check`) and the training commands' own validators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from core.names import comma_list
from mars.commands.app import app


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
    list_parts: bool = typer.Option(False, "--list", help="List the shipped experiments."),
) -> None:
    """Run a paper's experiment: every part as its `mars` command, resumable, then the report."""
    from mars.orchestration.experiments import (
        load_experiment,
        parse_sets,
        recipe_names,
        run_experiment,
        write_report,
    )
    from mars.orchestration.experiments.check import check_experiment
    from mars.orchestration.experiments.spec import experiment_path

    if list_parts or name is None:
        typer.echo("\n".join(recipe_names()))
        return
    experiment = load_experiment(name, parse_sets(sets or []))
    root = (run_dir or out / experiment.name).expanduser().resolve()
    chosen = comma_list(only, "--only") if only else None
    redo = comma_list(fresh, "--fresh") if fresh else []
    for part in [*(chosen or []), *redo]:
        experiment.part(part)  # an unknown name: one line
    if dry_run:
        lines = check_experiment(experiment, root, check_line=_check_line, check_train=_check_train)
        typer.echo("\n".join(lines))
        typer.echo(f"dry run: {len(lines)} parts checked; nothing run ({root})")
        return
    if not report_only:
        outcome = run_experiment(
            experiment,
            root,
            source=experiment_path(name),
            only=chosen,
            fresh=redo,
            log=typer.echo,
        )
        typer.echo(f"experiment {experiment.name}: {outcome.wall_s / 60:.1f} min")
    path = write_report(experiment, root)
    typer.echo(f"report: {path}")
    typer.echo(f"run dir: {root}")
    if not report_only and outcome.failed:
        codes = [p.exit_code for p in outcome.parts if p.exit_code]
        raise typer.Exit(codes[0] if codes else 1)


def _check_line(argv: list[str]) -> Any:
    from mars.command_check import check_command_line

    return check_command_line(argv)


def _check_train(item: Any) -> str:
    """The part's training config through the validators its command uses before it runs."""
    import tempfile

    import yaml

    args, config = item.args, dict(item.config)
    trainer = str(args.get("trainer", "local"))
    cpu_sized = trainer == "local" or args.get("device") == "cpu"
    if item.part.run == "train-mas":
        from mars.commands.train_mas import checked_config
        from train_backend.presets import preset_settings

        if args.get("preset"):
            config["preset"] = args["preset"]
        checked = checked_config(
            {**preset_settings(config.get("preset"), workflow=True), **config}, cpu_sized=cpu_sized
        )
        roles = f", policies {checked.policies}" if checked.policies else ""
        return f"{checked.workflow} on {checked.train_set}, {checked.steps} steps{roles}"
    from mars.commands.train import resolve_config
    from train_backend.local.trainer import check_config, check_games_and_estimator

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        flags = {"preset": args.get("preset"), "opponent": args.get("opponent")}
        resolved = resolve_config(
            path, flags, {}, local=cpu_sized, default_preset=None if cpu_sized else "marshal"
        )
    if trainer == "local":
        check_config(resolved)
    else:
        from mars.commands.train import _check_verl_opponent

        check_games_and_estimator(resolved)
        if resolved.opponent:
            _check_verl_opponent(resolved)
    against = f" vs {resolved.opponent}" if resolved.opponent else " self-play"
    return (
        f"{trainer}: {','.join(resolved.games)}{against}, {resolved.estimator}, "
        f"{resolved.steps} steps of {resolved.games_per_step} games"
    )


def report_hook(path: Path) -> str | None:
    """For `mars report`: the experiment report of an experiment folder, else None."""
    from mars.orchestration.experiments.report import report_folder

    return report_folder(path)
