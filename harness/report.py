"""Compare eval runs: a suite x run accuracy table, and paired differences on shared samples."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.errors import MarsError
from harness.runstore import RunDir
from harness.stats import paired_bootstrap_diff


def _cell(suite_summary: dict[str, Any] | None) -> str:
    if not suite_summary:
        return "-"
    lo, hi = suite_summary["ci95"]
    accuracy, n = suite_summary["accuracy"], suite_summary["n"]
    text = f"{100 * accuracy:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] n={n}"
    if suite_summary.get("errors"):
        text += f" err={suite_summary['errors']}"
    return text


def print_summary_table(
    summaries: dict[str, dict[str, Any]], console: Console | None = None
) -> None:
    """Accuracy % with 95% CI per suite (rows) and run (columns)."""
    console = console or Console()
    suites = sorted({name for s in summaries.values() for name in s.get("suites", {})})
    table = Table(title="accuracy % [95% CI]")
    table.add_column("suite")
    for run_name in summaries:
        table.add_column(run_name, overflow="fold")
    for suite in suites:
        table.add_row(suite, *(_cell(s.get("suites", {}).get(suite)) for s in summaries.values()))
    console.print(table)


def load_eval_run(path: Path) -> tuple[RunDir, dict[str, Any], list[dict[str, Any]]]:
    run = RunDir.open(path)
    if run.kind != "eval":
        raise MarsError(f"{path} is a '{run.kind}' run; mars report compares eval runs")
    records = run.records()
    summary = run.summary()
    if summary is None:
        from harness.evaluation import summarize

        summary = summarize(records)
    return run, summary, records


def paired_differences(
    records_a: list[dict[str, Any]], records_b: list[dict[str, Any]], seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per suite, B minus A accuracy on the (sample, epoch) attempts both runs graded."""

    def index(records: list[dict[str, Any]]) -> dict[tuple[str, str, int], bool]:
        return {
            (r["suite"], str(r["sample_id"]), int(r["epoch"])): bool(r.get("correct"))
            for r in records
            if not r.get("error")
        }

    a, b = index(records_a), index(records_b)
    shared = sorted(set(a) & set(b))
    out: dict[str, dict[str, Any]] = {}
    for suite in sorted({key[0] for key in shared}):
        keys = [k for k in shared if k[0] == suite]
        diff, lo, hi = paired_bootstrap_diff(
            [float(a[k]) for k in keys], [float(b[k]) for k in keys], seed=seed
        )
        out[suite] = {"n": len(keys), "diff": diff, "ci95": [lo, hi]}
    return out


def build_report(paths: list[Path]) -> dict[str, Any]:
    runs = [load_eval_run(p) for p in paths]
    names = _unique_names([run.path for run, _, _ in runs])
    report: dict[str, Any] = {
        "runs": {name: summary for name, (_, summary, _) in zip(names, runs, strict=True)},
        "models": {name: run.info().model for name, (run, _, _) in zip(names, runs, strict=True)},
    }
    if len(runs) == 2:
        report["paired"] = paired_differences(runs[0][2], runs[1][2])
    return report


def _unique_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]


def to_markdown(report: dict[str, Any]) -> str:
    runs: dict[str, Any] = report["runs"]
    suites = sorted({s for summary in runs.values() for s in summary.get("suites", {})})
    lines = ["| suite | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for suite in suites:
        cells = [_cell(summary.get("suites", {}).get(suite)) for summary in runs.values()]
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    paired = report.get("paired")
    if paired:
        first, second = list(runs)
        lines += ["", f"Paired difference ({second} - {first}), percentage points:", ""]
        lines += ["| suite | n | diff | 95% CI |", "|---|---|---|---|"]
        for suite, row in paired.items():
            lo, hi = row["ci95"]
            lines.append(
                f"| {suite} | {row['n']} | {100 * row['diff']:+.1f} | "
                f"[{100 * lo:+.1f}, {100 * hi:+.1f}] |"
            )
    return "\n".join(lines) + "\n"


def to_csv(report: dict[str, Any]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(
        ["run", "suite", "n", "accuracy", "ci_low", "ci_high", "errors", "extraction_failure_rate"]
    )
    for run_name, summary in report["runs"].items():
        for suite, row in sorted(summary.get("suites", {}).items()):
            writer.writerow(
                [
                    run_name,
                    suite,
                    row["n"],
                    f"{row['accuracy']:.6f}",
                    f"{row['ci95'][0]:.6f}",
                    f"{row['ci95'][1]:.6f}",
                    row["errors"],
                    f"{row['extraction_failure_rate']:.6f}",
                ]
            )
    return buffer.getvalue()
