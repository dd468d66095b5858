"""Compare eval runs: a suite x run table of one metric, and paired differences over questions.

The metrics (`--metric`, docs/benchmarks.md "Summary statistics": accuracy, maj@k, maj@K, pass@k,
pass@K) and the paired differences are `harness.report_metrics`; here the runs are loaded (a
directory with nothing to report is named with why), the report is built and written as a
terminal table, Markdown or CSV. `pass@k` takes K = the fewest graded attempts any question has
in the runs compared. Under `accuracy` a compute-matched baseline (`mars eval --match-compute`) is
scored by maj@k (harness.compute_report), and each run's tokens and calls per question stand
beside its metric.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from core.errors import ExitCode, MarsError
from core.names import a_run_of
from core.runstore import RUN_FILE, RunDir
from harness.compute_report import (
    COMPUTE_COLUMNS,
    COMPUTE_NOTE,
    compute_cell,
    compute_markdown,
    compute_texts,
    match_decision,
)
from harness.report_metrics import (
    Metric,
    Questions,
    metric_cell,
    paired_differences,
    parse_metric,
)
from harness.unscored import NO_SCORE

RATE_COLUMNS = ("extraction failed", "errors")
RATES_NOTE = "extraction failed: % of graded attempts; errors: % of all attempts"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _cell_texts(cell: dict[str, Any] | None) -> list[str]:
    """The metric, then the extraction-failure and error rates beside it."""
    if not cell:
        return ["-", "-", "-"]
    rates = [_percent(cell.get("extraction_failure_rate")), _percent(cell.get("error_rate"))]
    return [_cell_text(cell), *rates]


def _cell_text(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "-"
    if cell["value"] is None:
        text = "n/a (too few attempts)" if cell.get("left_out") else NO_SCORE
    else:
        lo, hi = cell["ci95"]
        text = f"{100 * cell['value']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] n={cell['n']}"
    if cell.get("errors"):
        text += f" err={cell['errors']}"
    return text


def accuracy_cells(summary: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    return {
        suite: metric_cell(stats, {}, Metric("accuracy"), None)
        for suite, stats in summary.get("suites", {}).items()
    }


def print_summary_table(
    summaries: dict[str, dict[str, Any]],
    console: Console | None = None,
    sources: dict[str, str] | None = None,
) -> None:
    """Accuracy % with 95% CI, extraction failures and errors per suite (rows) and run
    (columns); `sources` (suite -> where its samples came from) goes under the table."""
    cells = {name: accuracy_cells(s) for name, s in summaries.items()}
    lines = [f"{suite}: {origin}" for suite, origin in (sources or {}).items()]
    print_cells(cells, "accuracy", console, notes=lines)


def print_cells(
    cells: dict[str, dict[str, dict[str, Any] | None]],
    label: str,
    console: Console | None = None,
    *,
    notes: Sequence[str] = (),
    compute: dict[str, dict[str, dict[str, Any]]] | None = None,
    run_metrics: dict[str, str] | None = None,
) -> None:
    """The table of `cells`; `notes` (e.g. each suite's data source) go under it. With
    `compute` (`mars report`), each run's tokens and calls per question stand beside its
    metric; `run_metrics` names a run's own metric where it is not `label`."""
    console = console or Console()
    suites = sorted({suite for by_suite in cells.values() for suite in by_suite})
    unit = "questions" if label != "accuracy" else "graded attempts"
    title = f"{label} % [95% CI], n = {unit}"
    extra = COMPUTE_COLUMNS if compute is not None else ()

    def texts(run_name: str, suite: str) -> list[str]:
        """The metric and rates of a run on a suite, and its compute figures when asked."""
        row = _cell_texts(cells[run_name].get(suite))
        if compute is not None:
            row += compute_texts(compute.get(run_name, {}).get(suite))
        return row

    headers = {name: _run_header(name, label, run_metrics) for name in cells}
    table = Table(title=title)
    table.add_column("suite")
    for name in cells:  # the runs side by side: a row per suite
        table.add_column(headers[name], overflow="fold")
        for column in (*RATE_COLUMNS, *extra):
            table.add_column(column, justify="right")
    for suite in suites:
        table.add_row(suite, *(text for name in cells for text in texts(name, suite)))
    unbounded = console.options.update_width(1 << 16)
    if len(cells) > 1 and console.measure(table, options=unbounded).maximum > console.width:
        # They do not fit the terminal (80 columns, or fewer): a row per (suite, run).
        table = Table(title=title)
        for column in ("suite", "run", label):
            table.add_column(column, overflow="fold")
        for column in (*RATE_COLUMNS, *extra):
            table.add_column(column, justify="right")
        for suite in suites:
            for name in cells:
                table.add_row(suite, headers[name], *texts(name, suite))
            table.add_section()
    console.print(table)
    for line in (RATES_NOTE, *((COMPUTE_NOTE,) if extra else ()), *notes):
        # a hub source's `[config]` is no markup
        console.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)


def paired_what(report: dict[str, Any]) -> str:
    """`(B - A) in accuracy`, or with a run under its own metric `(B maj@k - A accuracy)`."""
    first, second = list(report["cells"])
    own = report.get("run_metrics") or {}
    label = report["metric"]
    a, b = own.get(first, label), own.get(second, label)
    return (
        f"({second} - {first}) in {label}" if a == b == label else f"({second} {b} - {first} {a})"
    )


def _run_header(name: str, label: str, run_metrics: dict[str, str] | None) -> str:
    own = (run_metrics or {}).get(name, label)
    return name if own == label else f"{name} ({own})"


@dataclass
class LoadedRun:
    run: RunDir
    summary: dict[str, Any]
    questions: dict[str, Questions]  # suite -> sample id -> attempts
    records: list[dict[str, Any]] = field(default_factory=list)


def load_eval_run(path: Path) -> LoadedRun:
    from harness.evaluation import question_attempts, record_key, summarize

    run = RunDir.open(path)
    if run.kind != "eval":
        raise MarsError(f"{path} is {a_run_of(run.kind)}; mars report compares eval runs")
    records = run.unique_records(record_key)
    # Recomputed from the records (the truth): older summaries lack the clustered interval.
    summary = summarize(records) if records else (run.summary() or {"suites": {}})
    return LoadedRun(run, summary, question_attempts(records), records)


def run_metric(loaded: LoadedRun, chosen: Metric) -> Metric:
    """The metric a run is scored by: `chosen`, except that under accuracy a compute-matched
    baseline is scored by maj@k (its vote over its k samples)."""
    if chosen.kind == "accuracy" and match_decision(loaded.run.info().config):
        return Metric("maj")
    return chosen


def resolve_k(metric: Metric, runs: list[LoadedRun], suite: str) -> int | None:
    """The K of `metric` in `suite`: as given, or for pass@k the fewest graded attempts any
    question has in any of the runs (None for maj@k: every attempt votes)."""
    if metric.k is not None or metric.kind != "pass":
        return metric.k
    counts = [len(v) for loaded in runs for v in loaded.questions.get(suite, {}).values()]
    return min(counts) if counts else None


class NothingToReport(MarsError):
    """No directory given to `mars report` holds eval records."""


@dataclass(frozen=True)
class NotReported:
    path: str
    reason: str
    failed_run: bool  # a run that failed or stayed empty, rather than a wrong path (bad input)

    @property
    def line(self) -> str:
        return self.reason if self.reason.startswith(self.path) else f"{self.path}: {self.reason}"


def nothing_to_report(skipped: list[NotReported]) -> NothingToReport:
    """One line naming each directory and why; exit code 4 (no score) when eval runs were given
    and none holds records, 2 (bad input) when no path was an eval run at all."""
    error = NothingToReport("nothing to report: " + "; ".join(n.line for n in skipped))
    failed = any(n.failed_run for n in skipped)
    error.exit_code = ExitCode.NO_SCORE if failed else ExitCode.BAD_INPUT
    return error


def not_reported(path: Path, error: MarsError) -> NotReported:
    """Why a directory given to `mars report` has nothing to report, in a few words."""
    path = Path(path)
    if not path.exists():
        return NotReported(str(path), "no such directory", failed_run=False)
    if path.is_dir() and not (path / RUN_FILE).exists():
        logs = sorted(path.glob("server-*.log"))
        if not logs:
            return NotReported(str(path), "not a run directory (no run.json)", failed_run=False)
        last = _last_line(logs[-1])
        reason = (
            f"failed before recording anything (no run.json, only {logs[-1].name}: the model "
            "server did not start?)" + (f"; the log ends: {last}" if last else "")
        )
        return NotReported(str(path), reason, failed_run=True)
    return NotReported(str(path), str(error), failed_run=False)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " ".join(lines[-1].split())[:200] if lines else ""


def load_reportable(paths: list[Path]) -> tuple[list[LoadedRun], list[NotReported]]:
    """The eval runs with something to report, and for each other path why not."""
    runs: list[LoadedRun] = []
    skipped: list[NotReported] = []
    for path in paths:
        try:
            loaded = load_eval_run(path)
        except MarsError as exc:
            skipped.append(not_reported(path, exc))
            continue
        if not loaded.summary.get("suites"):
            status = loaded.run.info().status
            skipped.append(
                NotReported(str(path), f"empty: no records (status {status})", failed_run=True)
            )
            continue
        runs.append(loaded)
    return runs, skipped


def build_report(paths: list[Path], metric: Metric | str = "accuracy") -> dict[str, Any]:
    """The report over every path that holds eval records; the others are listed under
    `not_reported` with why (a directory that is empty or failed does not sink the report)."""
    chosen = parse_metric(metric) if isinstance(metric, str) else metric
    runs, skipped = load_reportable(paths)
    names = _unique_names([loaded.run.path for loaded in runs])
    suites = sorted({s for loaded in runs for s in loaded.summary.get("suites", {})})
    ks = {suite: resolve_k(chosen, runs, suite) for suite in suites}
    named = dict(zip(names, runs, strict=True))
    metrics = {name: run_metric(loaded, chosen) for name, loaded in named.items()}
    cells = {
        name: {
            suite: metric_cell(
                loaded.summary.get("suites", {}).get(suite),
                loaded.questions.get(suite, {}),
                metrics[name],
                ks[suite],
            )
            for suite in suites
            if suite in loaded.summary.get("suites", {})
        }
        for name, loaded in named.items()
    }
    report: dict[str, Any] = {
        "metric": chosen.label,
        "k": ks if chosen.kind == "pass" else None,
        "runs": {name: loaded.summary for name, loaded in named.items()},
        "cells": cells,
        "run_metrics": {name: metric.label for name, metric in metrics.items()},
        "compute": {
            name: {
                suite: compute_cell(figures, metrics[name].kind, ks.get(suite, metrics[name].k))
                for suite, figures in loaded.summary.get("suites", {}).items()
            }
            for name, loaded in named.items()
        },
        "matches": _matches(named),
        "models": {name: loaded.run.info().model for name, loaded in named.items()},
        "paths": {name: str(loaded.run.path) for name, loaded in named.items()},
        "not_reported": skipped,
    }
    if len(runs) == 2:
        first, second = names
        report["paired"] = paired_differences(
            runs[0].questions, runs[1].questions, metrics[first], ks, metrics[second]
        )
    from harness.benchmarks.judge import agreement  # judge vs rule-based grades, where both

    report["grader_agreement"] = {
        name: agreement(loaded.run.records()) for name, loaded in zip(names, runs, strict=True)
    }
    return report


def _matches(named: dict[str, LoadedRun]) -> dict[str, dict[str, Any]]:
    """Each compute-matched baseline's match, its own figures recomputed from its records."""
    from harness.compute_match import match_summary

    out = {}
    for name, loaded in named.items():
        decision = match_decision(loaded.run.info().config)
        if decision is not None:
            out[name] = match_summary(decision, loaded.records)
    return out


def _unique_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]


def _k_note(report: dict[str, Any]) -> str:
    ks = report.get("k") or {}
    if not ks or report["metric"] != "pass@k":
        return ""
    return "k per suite: " + ", ".join(f"{suite} {k}" for suite, k in ks.items())


def to_markdown(report: dict[str, Any]) -> str:
    cells: dict[str, dict[str, Any]] = report["cells"]
    label = report["metric"]
    suites = sorted({s for by_suite in cells.values() for s in by_suite})
    compute = report.get("compute")
    extra = COMPUTE_COLUMNS if compute is not None else ()
    notes = "; ".join((RATES_NOTE, *((COMPUTE_NOTE,) if extra else ())))
    lines = [f"{label} %, [95% CI]; {notes}", ""]
    run_metrics = report.get("run_metrics")
    header = [
        text
        for run in cells
        for text in (_run_header(run, label, run_metrics), *RATE_COLUMNS, *extra)
    ]
    lines += ["| suite | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for suite in suites:
        row = []
        for run, by_suite in cells.items():
            row += _cell_texts(by_suite.get(suite))
            if compute is not None:
                row += compute_texts(compute.get(run, {}).get(suite))
        lines.append(f"| {suite} | " + " | ".join(row) + " |")
    note = _k_note(report)
    if note:
        lines += ["", note]
    paired = report.get("paired")
    if paired:
        lines += ["", f"Paired difference {paired_what(report)}, percentage points:"]
        lines += ["", "| suite | n | diff | 95% CI |", "|---|---|---|---|"]
        for suite, row in paired.items():
            lo, hi = row["ci95"]
            lines.append(
                f"| {suite} | {row['n']} | {100 * row['diff']:+.1f} | "
                f"[{100 * lo:+.1f}, {100 * hi:+.1f}] |"
            )
    lines += compute_markdown(report)
    skipped: list[NotReported] = report.get("not_reported") or []
    if skipped:
        lines += ["", "Not reported:", ""]
        lines += [f"- {n.line}" for n in skipped]
    from harness.benchmarks.judge import agreement_markdown

    return "\n".join(lines) + "\n" + agreement_markdown(report.get("grader_agreement") or {})


def _number(value: Any) -> str:
    return "" if value is None else f"{value:.6f}"


def to_csv(report: dict[str, Any]) -> str:
    """One row per (run, suite); an empty value is no score."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(
        [
            "run",
            "suite",
            "metric",
            "n",
            "value",
            "ci_low",
            "ci_high",
            "errors",
            "extraction_failure_rate",
            "error_rate",
            "tokens_per_question",
            "completion_tokens_per_question",
            "calls_per_question",
            "matches",
            "matched_k",
            "matched_ratio",
        ]
    )
    run_metrics = report.get("run_metrics") or {}
    for run_name, by_suite in report["cells"].items():
        match = (report.get("matches") or {}).get(run_name) or {}
        for suite, cell in sorted(by_suite.items()):
            if cell is None:
                continue
            low, high = cell["ci95"] or (None, None)
            compute = (report.get("compute") or {}).get(run_name, {}).get(suite) or {}
            matched = (match.get("suites") or {}).get(suite) or {}
            writer.writerow(
                [
                    run_name,
                    suite,
                    run_metrics.get(run_name, report["metric"]),
                    cell["n"],
                    _number(cell["value"]),
                    _number(low),
                    _number(high),
                    cell.get("errors", 0),
                    _number(cell.get("extraction_failure_rate")),
                    _number(cell.get("error_rate")),
                    _number(compute.get("tokens")),
                    _number(compute.get("completion_tokens")),
                    _number(compute.get("calls")),
                    match.get("run", "") if matched else "",
                    matched.get("k", ""),
                    _number(matched.get("ratio")),
                ]
            )
    return buffer.getvalue()
