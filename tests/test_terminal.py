"""What a person sees of a process: `mars dashboard` stops at once on SIGTERM, with its
Streamlit server; a table of runs converts to Arrow (what Streamlit does with every table)
without a traceback; a report of several runs stays readable in an 80-column terminal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import REPO


def test_sigterm_stops_the_dashboard_and_its_server_within_seconds(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "mars", "dashboard", "--runs", str(tmp_path), "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    url = process.stdout.readline().split()[2]  # "mars dashboard: http://127.0.0.1:PORT ..."
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        raise AssertionError("the dashboard never answered")
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)
    assert time.monotonic() - started < 5  # Streamlit alone takes 10 s or more
    leftover = subprocess.run(["pgrep", "-f", f"--runs {tmp_path}"], capture_output=True)
    assert leftover.stdout.strip() == b""


def test_the_exploitability_runs_table_converts_to_arrow() -> None:
    import pyarrow as pa

    from dashboard.data.exploitability import exploitability_runs_table

    table = exploitability_runs_table(
        {"exact": {"game": "kuhn_poker", "exact": True}, "sampled": {"samples": 64}, "none": None}
    )
    assert list(table["samples"][:2]) == ["exact", "64"] and table["samples"].isna()[2]
    pa.Table.from_pandas(table)  # a mixed str/int column raised ArrowTypeError here


def test_a_report_of_three_runs_stays_readable_at_80_columns() -> None:
    from rich.console import Console

    from harness.report import print_cells

    cell = {"value": 1 / 3, "ci95": [0.061, 0.792], "n": 3, "extraction_failure_rate": 0.0,
            "error_rate": 0.0}  # fmt: skip
    cells = {name: {"gsm8k": cell, "aqua": cell} for name in ("single", "mad", "autogen-team")}
    for width, layout in ((80, "a row per run"), (220, "runs side by side")):
        console = Console(width=width, record=True)
        print_cells(cells, "accuracy", console)
        text = console.export_text()
        table = text.split("extraction failed:")[0]
        assert all(len(line) <= width for line in table.splitlines()), layout
        assert "…" not in table, layout  # nothing cut short
        assert table.count("33.3") == 6, layout  # every run's every suite


def test_a_slow_first_question_announces_the_time_the_rest_will_take(
    tmp_path: Path, monkeypatch
) -> None:
    import asyncio
    import io

    from rich.console import Console

    from core.runstore import RunDir
    from harness import evaluation
    from harness.benchmarks import Sample, get_suite
    from harness.evaluation import SolvedSample, WorkItem, run_items

    monkeypatch.setattr(evaluation, "SLOW_FIRST_S", 0.2)
    suite = get_suite("gsm8k")
    items = [
        WorkItem(suite=suite, sample=Sample(id=str(i), question="q", gold="3"), epoch=0)
        for i in range(5)
    ]

    async def slow(item: WorkItem) -> SolvedSample:
        await asyncio.sleep(0.3)
        return SolvedSample(final_answer="\\boxed{3}")

    out = io.StringIO()
    console = Console(file=out, width=100)
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="eval", slug="t")
    asyncio.run(run_items(items, slow, run, workers=1, console=console))
    notes = [line for line in out.getvalue().splitlines() if line.startswith("note:")]
    assert len(notes) == 1, out.getvalue()
    assert "the first question took 0 s" in notes[0] and "the other 4 take about" in notes[0]


def test_the_arena_table_cuts_nothing_at_80_columns(monkeypatch, capsys) -> None:
    from mars.api.arena import print_arena_table

    monkeypatch.setenv("COLUMNS", "80")
    stats = {"n": 100, "win": 0.41, "draw": 0.0, "loss": 0.59, "mean_return": -0.125,
             "normalized_return": 46.9, "invalid_rate": 0.013,
             "mean_tokens_per_turn": 37.2}  # fmt: skip
    print_arena_table({"player": "llm", "opponent": "cfr:1000", "game": "kuhn_poker",
                       "seats": {"first": stats, "second": stats}})  # fmt: skip
    shown = capsys.readouterr().out
    assert "…" not in shown and all(len(line) <= 80 for line in shown.splitlines())
    assert "-0.125" in shown and "46.9" in shown and "0.013" in shown
