"""`mars failures`: MAST failure modes of an eval run's transcripts, and run-vs-run comparison
(`mars.api.failures`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from core.errors import MarsError
from core.model_options import ModelOptions
from mars.commands.app import app
from mars.commands.model_options import model_options

RUNS_OPTION = typer.Argument(
    ..., help="An eval run directory; or `compare RUN_A RUN_B` (or --compare RUN_A RUN_B)."
)
COMPARE_OPTION = typer.Option(
    False, "--compare", help="Compare the failure rates of two analysed runs (B minus A)."
)
INCLUDE_ALL_OPTION = typer.Option(
    False, "--all", help="Judge every transcript, not only the failed ones."
)
TRANSCRIPT_CHARS_OPTION = typer.Option(
    16000, "--max-transcript-chars", min=500, help="Transcript budget in the judge prompt."
)
RETRY_UNPARSED_OPTION = typer.Option(
    False, "--retry-unparsed", help="On resume, also re-judge replies that did not parse."
)
FRESH_OPTION = typer.Option(
    False, "--fresh", help="Discard the run's earlier failures.jsonl and start over."
)
RULES_OPTION = typer.Option(
    False,
    "--rules",
    help="Judge by rules instead of a model: the 8 modes a transcript's structure shows "
    "(harness.failures.rules); deterministic, no server.",
)


@app.command("failures")
@model_options(
    flags={"model": "--judge-model"},
    helps={
        "model": "Judge model: a checkpoint to serve (default: the embedded tiny model), or with "
        "--base-url the model name the server expects."
    },
)
def failures_command(
    runs: list[Path] = RUNS_OPTION,
    compare: bool = COMPARE_OPTION,
    include_all: bool = INCLUDE_ALL_OPTION,
    judge: ModelOptions = ModelOptions(),
    max_tokens: int = typer.Option(1024, "--max-tokens", min=16, help="Judge reply tokens."),
    transcript_chars: int = TRANSCRIPT_CHARS_OPTION,
    limit: int = typer.Option(None, "--limit", min=1, help="Judge at most N transcripts."),
    retry_unparsed: bool = RETRY_UNPARSED_OPTION,
    fresh: bool = FRESH_OPTION,
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap resamples (compare)."),
    as_json: bool = typer.Option(False, "--json", help="Compare: also print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    rules: bool = RULES_OPTION,
) -> None:
    """Classify failed MAS transcripts into the 14 MAST failure modes with an LLM judge."""
    from harness.unscored import exit_if_unscored
    from mars.api.failures import FailuresPlan, compare_failures, failures

    if runs and runs[0] == Path("compare") and not runs[0].exists():
        compare, runs = True, runs[1:]
    if compare:
        if len(runs) != 2:
            raise MarsError("compare needs exactly two run directories: RUN_A RUN_B")
        compared = compare_failures(runs[0], runs[1], n_boot=n_boot)
        if as_json:
            print(json.dumps({"compare": {"a": str(runs[0]), "b": str(runs[1]), **compared.data}}))
        return
    if len(runs) != 1:
        raise MarsError("give one eval run directory (or `compare RUN_A RUN_B`)")
    plan = FailuresPlan(
        run=runs[0],
        include_all=include_all,
        model_options=judge,
        max_tokens=max_tokens,
        transcript_chars=transcript_chars,
        limit=limit,
        retry_unparsed=retry_unparsed,
        fresh=fresh,
        quiet=quiet,
        rules=rules,
    )
    exit_if_unscored(list(failures(plan).unscored))
