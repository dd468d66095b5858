"""`mars data list | fetch | verify`: the benchmark test sets, where each comes from, where it is
on this machine, fetching it into the cache and checking it (docs/benchmarks.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from core.errors import ExitCode
from mars.commands.app import app

data_app = typer.Typer(
    help="The benchmark test sets: their sources, where they are here, fetch and verify.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

SuitesArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Suites, e.g. gsm8k aqua or gsm8k,aqua.", show_default=False),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Look only in this folder (as `mars eval --data-dir`)."),
]


@data_app.command("list")
def list_command(
    suites: SuitesArgument = None,
    data_dir: DataDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per suite.")] = False,
) -> None:
    """Each suite's source, rows, sha256 and the root it is found under here."""
    import json

    from rich.console import Console
    from rich.table import Table

    from harness.benchmarks import catalog

    names = catalog.suite_names(suites, default=[])
    overview = catalog.data_overview(names or None, data_dir)
    if as_json:
        for entry in overview:
            print(json.dumps(entry.as_json()))
        return
    table = Table(title="benchmark data")
    for column in ("suite", "source", "file under a data root", "rows", "sha256", "found here"):
        table.add_column(column, overflow="fold")
    for entry in overview:
        table.add_row(
            entry.suite,
            entry.source,
            entry.local_file or "-",
            "-" if entry.rows is None else str(entry.rows),
            entry.copy.sha256[:12] if entry.copy else "-",
            entry.where,
        )
    Console(markup=False, emoji=False, highlight=False).print(table)  # `[main]` is no markup
    print(catalog.roots_line(data_dir))
    if any(entry.local_file and entry.copy is None for entry in overview):
        print(
            f"{catalog.NOT_HERE}: `mars data fetch SUITE` where the hub is reachable, or "
            "--data-dir / $MARS_DATA_DIR pointing at a folder that holds the file"
        )


@data_app.command("fetch")
def fetch_command(
    suites: SuitesArgument = None,
    force: Annotated[bool, typer.Option("--force", help="Fetch suites already cached.")] = False,
) -> None:
    """Download test sets from the Hugging Face hub into the cache's data folder (default: the
    seven reasoning suites); the loader reads them from there."""
    from harness.benchmarks import catalog

    names = catalog.suite_names(suites, default=catalog.recorded_suites())
    for line in catalog.fetch(names, force=force):
        print(line, flush=True)


@data_app.command("verify")
def verify_command(suites: SuitesArgument = None, data_dir: DataDirOption = None) -> None:
    """Check the local files against the checksums recorded in the repository; one line per
    problem and a non-zero exit when a file is missing or differs."""
    from harness.benchmarks import catalog

    names = catalog.suite_names(suites, default=[])
    checks = catalog.verify(names or None, data_dir)
    for check in checks:
        if check.ok:
            print(check.line)
    problems = [check.line for check in checks if not check.ok]
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        raise typer.Exit(ExitCode.BAD_INPUT)


app.add_typer(data_app, name="data")
