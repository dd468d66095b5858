"""`mars report`: compare eval runs in the terminal and write markdown and CSV
(`mars.api.report`)."""

from __future__ import annotations

from pathlib import Path

import typer

from mars.commands.app import app

METRIC_HELP = (
    "accuracy (clustered by question over epochs), maj@k (majority vote over each question's "
    "epochs; maj@K: the first K), pass@k (unbiased; k = the fewest attempts per question; "
    "pass@K). Under accuracy a compute-matched baseline (mars eval --match-compute) is scored "
    "by maj@k."
)


@app.command("report")
def report_command(
    runs: list[Path] = typer.Argument(
        ..., help="Eval run directories, or one `mars experiment` folder."
    ),
    metric: str = typer.Option("accuracy", "--metric", help=METRIC_HELP),
    save: Path = typer.Option(
        None,
        "--save",
        help="Folder for report.md and report.csv (default: the last reported run's).",
    ),
) -> None:
    """A metric per suite x run with 95% CIs, extraction failures, errors, tokens and calls
    per question (and per role); with two runs, the paired difference over questions too. A
    compute-matched baseline (mars eval --match-compute) is scored by maj@k under accuracy and
    listed with the run it matches and the ratio of their tokens. A directory without records
    (a run that failed before its first sample) is named in one line and left out."""
    from mars.api.report import report

    report(runs, metric=metric, save=save)
