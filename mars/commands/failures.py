"""`mars failures`: MAST failure modes of an eval run's transcripts, and run-vs-run comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from core.files import write_json_atomic
from core.model_options import ModelOptions
from core.names import a_run_of, counted
from mars.commands.app import app
from mars.commands.model_options import model_options


@app.command("failures")
@model_options(
    flags={"model": "--judge-model"},
    helps={
        "model": "Judge model: a checkpoint to serve (default: the embedded tiny model), or with "
        "--base-url the model name the server expects."
    },
)
def failures_command(
    runs: list[Path] = typer.Argument(
        ..., help="An eval run directory; or `compare RUN_A RUN_B` (or --compare RUN_A RUN_B)."
    ),
    compare: bool = typer.Option(
        False, "--compare", help="Compare the failure rates of two analysed runs (B minus A)."
    ),
    include_all: bool = typer.Option(
        False, "--all", help="Judge every transcript, not only the failed ones."
    ),
    judge: ModelOptions = ModelOptions(),
    max_tokens: int = typer.Option(1024, "--max-tokens", min=16, help="Judge reply tokens."),
    transcript_chars: int = typer.Option(
        16000, "--max-transcript-chars", min=500, help="Transcript budget in the judge prompt."
    ),
    limit: int = typer.Option(None, "--limit", min=1, help="Judge at most N transcripts."),
    retry_unparsed: bool = typer.Option(
        False, "--retry-unparsed", help="On resume, also re-judge replies that did not parse."
    ),
    fresh: bool = typer.Option(
        False, "--fresh", help="Discard the run's earlier failures.jsonl and start over."
    ),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap resamples (compare)."),
    as_json: bool = typer.Option(False, "--json", help="Compare: also print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    rules: bool = typer.Option(
        False,
        "--rules",
        help="Judge by rules instead of a model: the 8 modes a transcript's structure shows "
        "(harness.failures.rules); deterministic, no server.",
    ),
) -> None:
    """Classify failed MAS transcripts into the 14 MAST failure modes with an LLM judge."""
    if runs and runs[0] == Path("compare") and not runs[0].exists():
        compare, runs = True, runs[1:]
    if compare:
        if len(runs) != 2:
            raise MarsError("compare needs exactly two run directories: RUN_A RUN_B")
        _compare(runs[0], runs[1], n_boot, as_json)
        return
    if len(runs) != 1:
        raise MarsError("give one eval run directory (or `compare RUN_A RUN_B`)")
    _analyse(
        runs[0],
        include_all=include_all,
        judge=judge,
        max_tokens=max_tokens,
        transcript_chars=transcript_chars,
        limit=limit,
        retry_unparsed=retry_unparsed,
        fresh=fresh,
        quiet=quiet,
        rules=rules,
    )


def _open_eval_run(path: Path) -> Any:
    from core.runstore import RunDir

    run = RunDir.open(path)
    if run.kind != "eval":
        raise MarsError(f"{path} is {a_run_of(run.kind)}; mars failures reads eval runs")
    return run


def _analyse(run_path: Path, **kw: Any) -> None:
    import os

    from core.endpoint import GenerationConfig
    from core.runstore import model_identity
    from harness.failures import (
        FAILURES_FILE,
        FAILURES_SUMMARY_FILE,
        FailureJudgeSettings,
        FailuresFile,
        TruncationLimits,
        check_failures_identity,
        failures_identity,
        select_records,
        summarize_failures,
        write_failures_identity,
    )

    run = _open_eval_run(run_path)
    records = run.records()
    selected = select_records(records, include_all=kw["include_all"])
    if kw["limit"]:
        selected = selected[: kw["limit"]]
    # --fresh judges into a new file beside the old one, which is replaced only once the new
    # verdicts are written: a judge that cannot be reached loses nothing already recorded.
    fresh, kept_path = kw["fresh"], run.path / FAILURES_FILE
    out = FailuresFile(kept_path.with_name(f".{FAILURES_FILE}.fresh") if fresh else kept_path)
    settings = FailureJudgeSettings(
        model="",  # the name the endpoint sends, set once it is known
        limits=TruncationLimits(transcript_chars=kw["transcript_chars"]),
        gen=GenerationConfig(temperature=0.0, max_tokens=kw["max_tokens"]),
    )
    judge: ModelOptions = kw["judge"]
    if kw["rules"]:
        from harness.failures.rules import RULES_JUDGE

        identity = failures_identity(RULES_JUDGE, settings)
    else:
        identity = failures_identity(model_identity(judge.model, judge.base_url), settings)
    if fresh:
        out.path.unlink(missing_ok=True)  # what an earlier --fresh that failed left
    else:
        check_failures_identity(run.path, identity)  # before any file changes
    try:
        judge_info, verdicts = _judge_all(run, selected, out, identity, settings, judge, kw)
    except BaseException:
        if fresh:
            out.path.unlink(missing_ok=True)
        raise
    if fresh:
        out.path.touch()  # nothing to judge: the fresh file is empty
        os.replace(out.path, kept_path)
        write_failures_identity(run.path, identity)
        out = FailuresFile(kept_path)
        verdicts = out.records()
    summary = summarize_failures(verdicts)
    summary.update(
        run=str(run.path),
        selection="all" if kw["include_all"] else "failed",
        n_selected=len(selected),
        malformed_lines=out.malformed_lines,
    )
    if judge_info:
        summary["judge"] = judge_info
    summary_path = run.path / FAILURES_SUMMARY_FILE
    write_json_atomic(summary_path, summary)
    _print_summary(summary)
    print(f"wrote {out.path} and {summary_path}")
    if verdicts and not summary["n_judged"]:  # no parsed verdict at all: no rates (exit 4)
        from harness.unscored import exit_if_unscored, no_score_line

        failed = [v for v in verdicts if v.get("error")]
        first = failed[0].get("error") if failed else "no judge reply could be parsed"
        exit_if_unscored(
            [no_score_line("the failure analysis", len(verdicts), "transcript", first)]
        )


def _judge_all(
    run: Any, selected: list[dict], out: Any, identity: dict, settings: Any, judge: Any, kw: dict
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Judge what `out` lacks; (the judge's description, every verdict in `out`)."""
    import asyncio
    import dataclasses

    from core.model_options import open_endpoint
    from harness.failures import is_judged, record_key, write_failures_identity

    done = out.prepare_resume(lambda v: is_judged(v, retry_unparsed=kw["retry_unparsed"]))
    todo = [r for r in selected if record_key(r) not in done]
    print(
        f"{run.path.name}: {counted(len(selected), 'transcript')} selected "
        f"({'all' if kw['include_all'] else 'failed only'}), {len(done)} already judged, "
        f"{len(todo)} to judge"
    )
    judge_info: dict[str, Any] = {}
    if todo and kw["rules"]:
        judge_info = _judge_by_rules(todo, done, run.path, identity, out, not kw["fresh"])
    elif todo:
        with open_endpoint(judge, run, settings.gen) as endpoint_config:
            _check_same_judge(done, endpoint_config.model, out.path, "the same --judge-model")
            settings = dataclasses.replace(settings, model=endpoint_config.model)
            if not kw["fresh"]:  # --fresh writes it once its verdicts replace the old
                write_failures_identity(run.path, identity)
            judge_info = {"model": endpoint_config.model, "base_url": endpoint_config.base_url}
            asyncio.run(_judge(todo, endpoint_config, settings, out, kw["quiet"]))
    verdicts = out.records()
    return judge_info, verdicts


def _check_same_judge(done: dict, judge_model: str, path: Path, rerun_with: str) -> None:
    """Refuse to add one judge's verdicts to a file another judge began."""
    earlier = {str(v.get("judge_model")) for v in done.values()}
    if earlier and earlier != {judge_model}:
        raise MarsError(
            f"{path} was judged by {', '.join(sorted(earlier))}; rerun with {rerun_with}, or "
            "with --fresh to start over"
        )


def _judge_by_rules(
    todo: list[dict], done: dict, run_path: Path, identity: dict[str, Any], out: Any, write: bool
) -> dict[str, Any]:
    from harness.failures import write_failures_identity
    from harness.failures.rules import RULES_JUDGE, rule_verdict

    _check_same_judge(done, RULES_JUDGE, out.path, "--rules")
    if write:
        write_failures_identity(run_path, identity)
    for record in todo:
        out.append(rule_verdict(record))
    return {"model": RULES_JUDGE}


async def _judge(
    todo: list[dict], endpoint_config: Any, settings: Any, out: Any, quiet: bool
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from core.endpoint import Endpoint
    from harness.failures import judge_records

    endpoint = Endpoint(endpoint_config)
    progress = Progress(
        TextColumn("judging"), BarColumn(), MofNCompleteColumn(), disable=quiet, transient=True
    )
    task = progress.add_task("judge", total=len(todo))
    try:
        with progress:
            await judge_records(
                todo, endpoint, settings, out.append, on_done=lambda _: progress.advance(task)
            )
    finally:
        await endpoint.aclose()


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"MAST failure modes: {summary['n_judged']} transcripts judged")
    for column in ("mode", "name", "rate %", "95% CI", "count"):
        table.add_column(column)
    for key, row in summary["categories"].items():
        table.add_row(row["id"], f"[bold]{row['name']}[/bold]", *_rate_cells(row))
        for mode_id, mode in summary["modes"].items():
            if mode["category"] == key:
                table.add_row(f"  {mode_id}", mode["name"], *_rate_cells(mode))
    table.add_row("any", "[bold]any failure mode[/bold]", *_rate_cells(summary["any_failure"]))
    console.print(table)
    notes = []
    if summary["parse_failures"]:
        notes.append(f"{summary['parse_failures']} replies did not parse")
    if summary["errors"]:
        notes.append(f"{summary['errors']} judge calls failed (rerun to retry them)")
    if summary.get("malformed_lines"):
        notes.append(f"{summary['malformed_lines']} malformed lines skipped")
    if notes:
        print("; ".join(notes))


def _rate_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    if not row["n"]:
        return "-", "-", "0"
    low, high = row["ci95"]
    return f"{100 * row['rate']:.1f}", f"[{100 * low:.1f}, {100 * high:.1f}]", str(row["count"])


def _compare(path_a: Path, path_b: Path, n_boot: int, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from harness.failures import (
        FAILURES_FILE,
        compare_failures,
        load_failures,
        summarize_failures,
    )

    verdicts = []
    for path in (path_a, path_b):
        run = _open_eval_run(path)
        loaded, _ = load_failures(run.path)
        if not loaded:
            raise MarsError(
                f"{run.path / FAILURES_FILE} has no verdicts: run `mars failures {path}`"
            )
        if not summarize_failures(loaded)["n_judged"]:
            raise MarsError(
                f"{run.path / FAILURES_FILE} has no parsed verdict (every judge reply failed or "
                f"did not parse): no failure rates to compare; rerun `mars failures {path}` "
                "with another judge (--fresh), or with --rules"
            )
        verdicts.append(loaded)
    result = compare_failures(verdicts[0], verdicts[1], n_boot=n_boot)
    table = Table(
        title=f"failure rates: B ({path_b.name}) - A ({path_a.name}), "
        f"{result['method']} bootstrap 95% CI"
    )
    for column in ("category", "A %", "B %", "B - A (points)", "95% CI"):
        table.add_column(column)
    rows = [(row["name"], row) for row in result["categories"].values()]
    rows.append(("any failure mode", result["any_failure"]))
    for name, row in rows:
        low, high = row["ci95"]
        table.add_row(
            name,
            f"{100 * row['rate_a']:.1f}",
            f"{100 * row['rate_b']:.1f}",
            f"{100 * row['diff']:+.1f}",
            f"[{100 * low:+.1f}, {100 * high:+.1f}]",
        )
    Console(width=max(100, Console().width)).print(table)
    print(
        f"n: A {result['n_a']}, B {result['n_b']}, shared {result['n_shared']} ({result['method']})"
    )
    if as_json:
        print(json.dumps({"compare": {"a": str(path_a), "b": str(path_b), **result}}))
