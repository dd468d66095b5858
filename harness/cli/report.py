"""`mars report`: compare eval runs in the terminal and write markdown and CSV."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli.main import app


@app.command("report")
def report_command(
    runs: list[Path] = typer.Argument(..., help="Eval run directories."),
    save: Path = typer.Option(
        None, "--save", help="Folder for report.md and report.csv (default: the last run's)."
    ),
) -> None:
    """Accuracy per suite x run with 95% CIs; with two runs, the paired difference too."""
    from rich.console import Console
    from rich.table import Table

    from harness.report import build_report, print_summary_table, to_csv, to_markdown

    report = build_report(runs)
    console = Console()
    print_summary_table(report["runs"], console)
    paired = report.get("paired")
    if paired:
        first, second = list(report["runs"])
        table = Table(title=f"paired difference ({second} - {first}), points [95% bootstrap CI]")
        for column in ("suite", "n", "diff", "95% CI"):
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
    folder = save or runs[-1]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.md").write_text(to_markdown(report))
    (folder / "report.csv").write_text(to_csv(report))
    print(f"wrote {folder / 'report.md'} and {folder / 'report.csv'}")
