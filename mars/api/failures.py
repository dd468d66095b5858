"""`mars.failures`: the MAST failure modes of an eval run's transcripts, judged by a model (or by
rules), resumable; and `compare_failures`: run B's failure rates minus run A's.

`mars failures` parses its options into a `FailuresPlan` and calls `failures` (or, for
`compare`, `compare_failures`). The verdicts go to the eval run's failures.jsonl, the rates to
its failures_summary.json.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.model_options import ModelOptions
from core.names import a_run_of, counted
from mars.api.plans import build_plan
from mars.api.results import Figure


@dataclasses.dataclass(frozen=True)
class FailuresPlan:
    """What `mars failures RUN` judges: the failed transcripts of the eval run `run` (every one
    with `include_all`, at most `limit`), by the judge model of `model_options` (the embedded
    tiny model by default; `rules`: by the transcript's structure, no model)."""

    run: Path
    include_all: bool = False
    model_options: ModelOptions = dataclasses.field(default_factory=ModelOptions)
    max_tokens: int = 1024
    transcript_chars: int = 16000
    limit: int | None = None
    retry_unparsed: bool = False
    fresh: bool = False
    quiet: bool = False
    rules: bool = False


@dataclasses.dataclass(frozen=True)
class FailuresResult:
    """An analysed eval run: `figures` names the share of judged transcripts showing each MAST
    category (`FC1`...) and mode (`FM-1.1`...), and `any`, with 95% intervals; `summary` is
    failures_summary.json; `unscored` a line when no verdict parsed (the command exits 4)."""

    run_dir: Path
    summary: dict[str, Any]
    figures: dict[str, Figure]
    unscored: tuple[str, ...] = ()

    def verdicts(self) -> list[dict[str, Any]]:
        """failures.jsonl: one verdict per judged transcript."""
        from harness.failures import FAILURES_FILE, FailuresFile

        return FailuresFile(self.run_dir / FAILURES_FILE).records()


@dataclasses.dataclass(frozen=True)
class FailuresComparison:
    """Run B's failure rates minus run A's: `figures` per category name and `any failure mode`
    (points as fractions, bootstrap 95% interval; paired when both judged the same
    transcripts); `data` is harness.failures' whole comparison."""

    run_a: Path
    run_b: Path
    figures: dict[str, Figure]
    data: dict[str, Any]


def failures(plan: FailuresPlan | None = None, /, **kwargs: Any) -> FailuresResult:
    """Judge `plan`'s transcripts (what failures.jsonl lacks), write the summary and print it."""
    import os

    from core.files import write_json_atomic
    from harness.failures import FAILURES_SUMMARY_FILE, summarize_failures

    plan = build_plan(FailuresPlan, plan, kwargs)
    _check_bounds(plan)
    run = open_eval_run(plan.run, "failures")
    selected, settings, identity = _prepare(plan, run)
    # --fresh judges into a new file beside the old one, which is replaced only once the new
    # verdicts are written: a judge that cannot be reached loses nothing already recorded.
    out, kept_path = _output(plan, run.path, identity)
    try:
        judge_info, verdicts = _judge_all(plan, run, selected, out, identity, settings)
    except BaseException:
        if plan.fresh:
            out.path.unlink(missing_ok=True)
        raise
    if plan.fresh:
        from harness.failures import FailuresFile, write_failures_identity

        out.path.touch()  # nothing to judge: the fresh file is empty
        os.replace(out.path, kept_path)
        write_failures_identity(run.path, identity)
        out = FailuresFile(kept_path)
        verdicts = out.records()
    summary = summarize_failures(verdicts)
    summary.update(
        run=str(run.path),
        selection="all" if plan.include_all else "failed",
        n_selected=len(selected),
        malformed_lines=out.malformed_lines,
    )
    if judge_info:
        summary["judge"] = judge_info
    summary_path = run.path / FAILURES_SUMMARY_FILE
    write_json_atomic(summary_path, summary)
    print_failures(summary)
    print(f"wrote {out.path} and {summary_path}")
    return FailuresResult(run.path, summary, failure_figures(summary), _unscored(summary, verdicts))


def open_eval_run(path: Path, command: str) -> Any:
    """The eval run at `path` (one line when it is none, or another kind of run)."""
    from core.runstore import RunDir

    run = RunDir.open(Path(path))
    if run.kind != "eval":
        raise MarsError(f"{path} is {a_run_of(run.kind)}; mars {command} reads eval runs")
    return run


def _check_bounds(plan: FailuresPlan) -> None:
    """The command line's bounds of `mars failures`' own options, in one line each."""
    for flag, value, low in (
        ("--limit", plan.limit, 1),
        ("--max-tokens", plan.max_tokens, 16),
        ("--max-transcript-chars", plan.transcript_chars, 500),
    ):
        if value is not None and value < low:
            raise MarsError(f"{flag} must be at least {low}, not {value}")


def _prepare(plan: FailuresPlan, run: Any) -> tuple[list[dict[str, Any]], Any, dict[str, Any]]:
    """The transcripts to judge, the judge's settings and the analysis' identity."""
    from core.endpoint import GenerationConfig
    from core.runstore import model_identity
    from harness.failures import (
        FailureJudgeSettings,
        TruncationLimits,
        failures_identity,
        select_records,
    )

    selected = select_records(run.records(), include_all=plan.include_all)
    if plan.limit:
        selected = selected[: plan.limit]
    settings = FailureJudgeSettings(
        model="",  # the name the endpoint sends, set once it is known
        limits=TruncationLimits(transcript_chars=plan.transcript_chars),
        gen=GenerationConfig(temperature=0.0, max_tokens=plan.max_tokens),
    )
    judge = plan.model_options
    if plan.rules:
        from harness.failures.rules import RULES_JUDGE

        identity = failures_identity(RULES_JUDGE, settings)
    else:
        identity = failures_identity(model_identity(judge.model, judge.base_url), settings)
    return selected, settings, identity


def _output(plan: FailuresPlan, run_path: Path, identity: dict[str, Any]) -> tuple[Any, Path]:
    """The verdicts file to write (a fresh one beside the kept one with --fresh) and the kept
    one's path; the analysis' identity checked before any file changes."""
    from harness.failures import FAILURES_FILE, FailuresFile, check_failures_identity

    kept_path = run_path / FAILURES_FILE
    if plan.fresh:
        out = FailuresFile(kept_path.with_name(f".{FAILURES_FILE}.fresh"))
        out.path.unlink(missing_ok=True)  # what an earlier --fresh that failed left
    else:
        out = FailuresFile(kept_path)
        check_failures_identity(run_path, identity)  # before any file changes
    return out, kept_path


def _judge_all(
    plan: FailuresPlan,
    run: Any,
    selected: list[dict],
    out: Any,
    identity: dict,
    settings: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Judge what `out` lacks; (the judge's description, every verdict in `out`)."""
    import asyncio

    from core.model_options import open_endpoint
    from harness.failures import is_judged, record_key, write_failures_identity

    done = out.prepare_resume(lambda v: is_judged(v, retry_unparsed=plan.retry_unparsed))
    todo = [r for r in selected if record_key(r) not in done]
    print(
        f"{run.path.name}: {counted(len(selected), 'transcript')} selected "
        f"({'all' if plan.include_all else 'failed only'}), {len(done)} already judged, "
        f"{len(todo)} to judge"
    )
    judge_info: dict[str, Any] = {}
    if todo and plan.rules:
        judge_info = _judge_by_rules(todo, done, run.path, identity, out, not plan.fresh)
    elif todo:
        with open_endpoint(plan.model_options, run, settings.gen) as endpoint_config:
            _check_same_judge(done, endpoint_config.model, out.path, "the same --judge-model")
            settings = dataclasses.replace(settings, model=endpoint_config.model)
            if not plan.fresh:  # --fresh writes it once its verdicts replace the old
                write_failures_identity(run.path, identity)
            judge_info = {"model": endpoint_config.model, "base_url": endpoint_config.base_url}
            asyncio.run(_judge(todo, endpoint_config, settings, out, plan.quiet))
    return judge_info, out.records()


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


def _unscored(summary: dict[str, Any], verdicts: list[dict[str, Any]]) -> tuple[str, ...]:
    """A line when there are verdicts but not one parsed: no rates (exit 4)."""
    if not verdicts or summary["n_judged"]:
        return ()
    from harness.unscored import no_score_line

    failed = [v for v in verdicts if v.get("error")]
    first = failed[0].get("error") if failed else "no judge reply could be parsed"
    return (no_score_line("the failure analysis", len(verdicts), "transcript", first),)


def failure_figures(summary: dict[str, Any]) -> dict[str, Figure]:
    """Each category's and mode's share of the judged transcripts, and `any`."""
    rows = {row["id"]: row for row in summary["categories"].values()}
    rows |= summary["modes"]
    rows["any"] = summary["any_failure"]
    return {key: _rate_figure(row) for key, row in rows.items()}


def _rate_figure(row: dict[str, Any]) -> Figure:
    if not row.get("n"):
        return Figure(None, None, 0)
    low, high = row["ci95"]
    return Figure(row["rate"], (low, high), row["n"])


def print_failures(summary: dict[str, Any]) -> None:
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


# -- run against run ---------------------------------------------------------------------------


def compare_failures(run_a: Path, run_b: Path, n_boot: int = 2000) -> FailuresComparison:
    """Run B's failure rates minus run A's (both analysed by `failures` first); printed."""
    from harness.failures import compare_failures as compare

    verdicts = [_parsed_verdicts(Path(path)) for path in (run_a, run_b)]
    data = compare(verdicts[0], verdicts[1], n_boot=n_boot)
    _print_comparison(Path(run_a), Path(run_b), data)
    rows = [(row["name"], row) for row in data["categories"].values()]
    rows.append(("any failure mode", data["any_failure"]))
    figures = {
        name: Figure(row["diff"], (row["ci95"][0], row["ci95"][1]), data["n_shared"] or None)
        for name, row in rows
    }
    return FailuresComparison(Path(run_a), Path(run_b), figures, data)


def _parsed_verdicts(path: Path) -> list[dict[str, Any]]:
    """An analysed run's verdicts; one line when it has none, or none parsed."""
    from harness.failures import FAILURES_FILE, load_failures, summarize_failures

    run = open_eval_run(path, "failures")
    loaded, _ = load_failures(run.path)
    if not loaded:
        raise MarsError(f"{run.path / FAILURES_FILE} has no verdicts: run `mars failures {path}`")
    if not summarize_failures(loaded)["n_judged"]:
        raise MarsError(
            f"{run.path / FAILURES_FILE} has no parsed verdict (every judge reply failed or "
            f"did not parse): no failure rates to compare; rerun `mars failures {path}` "
            "with another judge (--fresh), or with --rules"
        )
    return loaded


def _print_comparison(path_a: Path, path_b: Path, result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

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
