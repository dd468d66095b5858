"""`mars report`: compare eval runs in the terminal and write markdown and CSV."""

from __future__ import annotations

from pathlib import Path

import typer

from core.errors import MarsError
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
    from rich.console import Console
    from rich.table import Table

    from harness.report import (
        build_report,
        nothing_to_report,
        paired_what,
        parse_metric,
        print_cells,
        to_csv,
        to_markdown,
    )

    seen: set[Path] = set()
    for run in runs:
        if run.resolve() in seen:
            raise MarsError(f"{run} is given twice; give each run once")
        seen.add(run.resolve())
    if save is not None and save.exists() and not save.is_dir():
        raise MarsError(f"--save {save} is a file; give a folder for report.md and report.csv")
    if len(runs) == 1:
        from mars.orchestration.experiments.command import report_hook

        experiment = report_hook(runs[0])  # an experiment folder: its paper-style report
        if experiment is not None:
            print(experiment)
            return
    chosen = parse_metric(metric)
    report = build_report(runs, chosen)
    if not report["cells"]:
        raise nothing_to_report(report["not_reported"])
    for skipped in report["not_reported"]:
        print(f"not reported: {skipped.line}", flush=True)
    console = Console()
    print_cells(
        report["cells"],
        report["metric"],
        console,
        compute=report["compute"],
        run_metrics=report["run_metrics"],
    )
    paired = report.get("paired")
    if paired:
        table = Table(
            title=f"paired difference {paired_what(report)}, points "
            "[95% bootstrap CI over questions]"
        )
        for column in ("suite", "questions", "diff", "95% CI"):
            table.add_column(column)
        for suite, row in paired.items():
            lo, hi = row["ci95"]
            table.add_row(
                suite,
                str(row["n"]),
                f"{100 * row['diff']:+.1f}",
                f"[{100 * lo:+.1f}, {100 * hi:+.1f}]",
            )
        console.print(table)
    from harness.compute_report import print_compute

    print_compute(report, console)
    from harness.benchmarks.judge import print_agreement

    print_agreement(report.get("grader_agreement") or {}, console)
    folder = save or Path(list(report["paths"].values())[-1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.md").write_text(to_markdown(report))
    (folder / "report.csv").write_text(to_csv(report))
    print(f"wrote {folder / 'report.md'} and {folder / 'report.csv'}")
