"""`mars export`: an eval run in another tool's log format (Inspect's, for `inspect view`), or,
with `--merge`, a LoRA adapter checkpoint merged into its base as one Hugging Face model."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from core.errors import MarsError
from mars.commands.app import app

FORMATS = ("inspect",)


@app.command("export")
def export_command(
    run: Path = typer.Argument(
        ..., help="An eval run directory; with --merge, a LoRA adapter checkpoint (step_N/)."
    ),
    format: str = typer.Option(None, "--format", help="Log format of an eval run: inspect."),
    merge: bool = typer.Option(
        False,
        "--merge",
        help="Merge the adapter checkpoint RUN into its base and write one Hugging Face model "
        "folder to -o DIR (loadable by from_pretrained, servable by transformers or vLLM).",
    ),
    output: Path = typer.Option(
        None,
        "-o",
        "--output",
        help="Directory for the logs (default RUN/inspect), or a .eval/.json file for a "
        "single-suite run; with --merge, the new model folder (required).",
    ),
) -> None:
    """Write an eval run as Inspect eval logs (one per suite) that `inspect view` opens, or
    (--merge) an adapter checkpoint as a merged Hugging Face model."""
    if merge:
        _merge(run, format, output)
        return
    format = format or "inspect"
    if format not in FORMATS:
        raise MarsError(f"--format {format!r} is not supported; choose from: {', '.join(FORMATS)}")
    from harness.export_inspect import export_inspect

    written = export_inspect(run, output)
    for path in written:
        print(f"wrote {path}")
    folder = written[0].parent
    print(f"open with: inspect view --log-dir {shlex.quote(str(folder))}")


def _merge(adapter: Path, format: str | None, output: Path | None) -> None:
    from train_backend.local.merge import check_merge_source, check_merge_target, write_merged

    if format is not None:
        raise MarsError("--merge writes a model, not logs: leave out --format")
    if output is None:
        raise MarsError("--merge needs -o DIR: the new folder for the merged model")
    check_merge_source(adapter)  # one line each, before the models load
    check_merge_target(output)
    written = write_merged(adapter, output)
    print(f"wrote {written} (the adapter {adapter} merged into its base)")
    print(f"serve it with: mars serve {written}")
