"""`mars export`: an eval run in another tool's log format (Inspect's, for `inspect view`)."""

from __future__ import annotations

from pathlib import Path

import typer

from core.errors import MarsError
from mars.main import app

FORMATS = ("inspect",)


@app.command("export")
def export_command(
    run: Path = typer.Argument(..., help="An eval run directory."),
    format: str = typer.Option("inspect", "--format", help="Log format: inspect."),
    output: Path = typer.Option(
        None,
        "-o",
        "--output",
        help="Directory for the logs (default RUN/inspect), or a .eval/.json file for a "
        "single-suite run.",
    ),
) -> None:
    """Write an eval run as Inspect eval logs (one per suite) that `inspect view` opens."""
    if format not in FORMATS:
        raise MarsError(f"--format {format!r} is not supported; choose from: {', '.join(FORMATS)}")
    from harness.export_inspect import export_inspect

    written = export_inspect(run, output)
    for path in written:
        print(f"wrote {path}")
    folder = written[0].parent
    print(f"open with: inspect view --log-dir {folder}")
