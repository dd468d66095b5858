"""`mars.report`: compare eval runs, a metric per suite x run with 95% intervals, and write
report.md and report.csv (`harness.report` builds it).

`mars report` calls `report` and prints nothing of its own; a notebook reads the result's
figures, rows and text. One folder that is not an eval run may be another kind the layers above
know (an experiment folder: its paper-style report); they register a reader for it here
(`register_folder_report`), so this layer reads no experiment itself.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core.errors import MarsError
from mars.api.results import Figure

FolderReport = Callable[[Path], str | None]
# Each returns a folder's report as text, or None when the folder is not of its kind.
FOLDER_REPORTS: list[FolderReport] = []


def register_folder_report(reader: FolderReport) -> None:
    """Let `report` read one folder of another kind (tried before reading it as an eval run)."""
    if reader not in FOLDER_REPORTS:
        FOLDER_REPORTS.append(reader)


@dataclasses.dataclass(frozen=True)
class ReportResult:
    """A report: `figures` names each run's metric per suite (value, 95% interval, graded
    attempts); `paired` each suite's difference, second run minus first, over the questions
    both answered (two runs only); `text` is what was printed; `markdown` and `csv` what was
    written to `saved`. A folder another layer reads (an experiment's) has only `text` and
    `markdown`: its report. `data` is harness.report's whole report."""

    metric: str
    figures: dict[str, dict[str, Figure]]
    paired: dict[str, Figure]
    not_reported: tuple[str, ...]
    text: str
    markdown: str
    csv: str = ""
    saved: tuple[Path, ...] = ()
    data: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    def rows(self) -> list[dict[str, str]]:
        """report.csv's rows: one per run and suite (an empty value is no score)."""
        return list(csv.DictReader(io.StringIO(self.csv))) if self.csv else []


def report(
    runs: Path | str | Sequence[Path | str],
    metric: str = "accuracy",
    save: Path | str | None = None,
    quiet: bool = False,
) -> ReportResult:
    """The report over `runs` (eval run folders, or one folder a registered reader knows),
    printed unless `quiet`; report.md and report.csv go to `save` (default: the last reported
    run's folder). A folder without records is named in one line and left out."""
    paths = [Path(runs)] if isinstance(runs, str | Path) else [Path(run) for run in runs]
    save_to = Path(save) if save is not None else None
    _check(paths, save_to)
    if len(paths) == 1:
        for reader in FOLDER_REPORTS:
            text = reader(paths[0])
            if text is not None:
                return _folder_result(text, quiet)
    from harness.report import build_report, nothing_to_report
    from harness.report_metrics import parse_metric

    data = build_report(paths, parse_metric(metric))
    if not data["cells"]:
        raise nothing_to_report(data["not_reported"])
    text = _show(data, quiet)
    return _write(data, save_to, text, quiet)


def _check(paths: list[Path], save: Path | None) -> None:
    if not paths:
        raise MarsError("give at least one eval run directory")
    seen: set[Path] = set()
    for run in paths:
        if run.resolve() in seen:
            raise MarsError(f"{run} is given twice; give each run once")
        seen.add(run.resolve())
    if save is not None and save.exists() and not save.is_dir():
        raise MarsError(f"--save {save} is a file; give a folder for report.md and report.csv")


def _folder_result(text: str, quiet: bool) -> ReportResult:
    if not quiet:
        print(text)
    return ReportResult(
        metric="", figures={}, paired={}, not_reported=(), text=text + "\n", markdown=text
    )


def _show(data: dict[str, Any], quiet: bool) -> str:
    """Print the report's tables (unless `quiet`); the text printed."""
    from rich.console import Console

    from harness.benchmarks.judge import print_agreement
    from harness.compute_report import print_compute
    from harness.report import print_cells

    lines = [f"not reported: {skipped.line}\n" for skipped in data["not_reported"]]
    if not quiet:
        for line in lines:
            print(line, end="", flush=True)
    console = Console(record=True, file=io.StringIO() if quiet else None)
    print_cells(
        data["cells"],
        data["metric"],
        console,
        compute=data["compute"],
        run_metrics=data["run_metrics"],
    )
    _print_paired(data, console)
    print_compute(data, console)
    print_agreement(data.get("grader_agreement") or {}, console)
    return "".join(lines) + console.export_text()


def _print_paired(data: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    from harness.report import paired_what

    paired = data.get("paired")
    if not paired:
        return
    table = Table(
        title=f"paired difference {paired_what(data)}, points [95% bootstrap CI over questions]"
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


def _write(data: dict[str, Any], save: Path | None, text: str, quiet: bool) -> ReportResult:
    """Write report.md and report.csv; the result."""
    from harness.report import to_csv, to_markdown

    folder = save or Path(list(data["paths"].values())[-1])
    folder.mkdir(parents=True, exist_ok=True)
    markdown, table = to_markdown(data), to_csv(data)
    (folder / "report.md").write_text(markdown)
    (folder / "report.csv").write_text(table)
    wrote = f"wrote {folder / 'report.md'} and {folder / 'report.csv'}"
    if not quiet:
        print(wrote)
    return ReportResult(
        metric=data["metric"],
        figures={
            run: {suite: _figure(cell) for suite, cell in by_suite.items() if cell is not None}
            for run, by_suite in data["cells"].items()
        },
        paired={
            suite: Figure(row["diff"], _pair(row.get("ci95")), row.get("n"))
            for suite, row in (data.get("paired") or {}).items()
        },
        not_reported=tuple(skipped.line for skipped in data["not_reported"]),
        text=text + wrote + "\n",
        markdown=markdown,
        csv=table,
        saved=(folder / "report.md", folder / "report.csv"),
        data=data,
    )


def _figure(cell: dict[str, Any]) -> Figure:
    return Figure(cell.get("value"), _pair(cell.get("ci95")), cell.get("n"))


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2 and None not in value:
        return (float(value[0]), float(value[1]))
    return None
