"""Helpers for the dashboard's AppTest tests: open a page on a runs root, find tables and values."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
from streamlit.testing.v1 import AppTest

from core.stats import wilson_ci
from dashboard.defaults import STATE_ENV
from dashboard.paths import RUNS_ROOT_ENV

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")
PAGE_SLUGS = {
    "Runs": "runs",
    "Samples": "samples",
    "Compare": "compare",
    "Failure modes": "failure-modes",
    "Games": "games",
    "Training": "training",
    "Inspector": "inspector",
    "Experiments": "experiments",
}

OpenPage = Callable[..., AppTest]


@contextmanager
def page_opener(default_root: Path) -> Iterator[OpenPage]:
    """`open_page(page, runs_root=None, via="sidebar"|"url", state_file=None, **query)`: the page
    rendered.

    `via="url"` selects the page with `?page=<slug>` as a link would; `via="sidebar"` clicks it.
    `state_file`: the dashboard's state file (the runs opened last, dashboard/defaults.py); by
    default a new one for each page opened, so no test opens the run another test picked.
    """
    previous = {name: os.environ.get(name) for name in (RUNS_ROOT_ENV, STATE_ENV)}
    folder = tempfile.TemporaryDirectory(prefix="mars-dashboard-state-")
    scratch = Path(folder.name)
    opened = iter(range(1_000_000))

    def open_page(
        page: str,
        runs_root: Path | None = None,
        via: str = "sidebar",
        state_file: Path | None = None,
        **query: str,
    ) -> AppTest:
        os.environ[RUNS_ROOT_ENV] = str(runs_root or default_root)
        os.environ[STATE_ENV] = str(state_file or scratch / f"state-{next(opened)}.json")
        test = AppTest.from_file(APP, default_timeout=60)
        if via == "url":
            query = {"page": PAGE_SLUGS[page], **query}
        test.query_params.update(query)
        test.run()
        if via == "sidebar" and page != "Runs":
            test.sidebar.radio(key="page").set_value(page).run()
        assert not test.exception, [e.value for e in test.exception]
        assert test.sidebar.radio(key="page").value == page
        return test

    try:
        yield open_page
    finally:
        folder.cleanup()
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def ci_text(successes: int, n: int) -> str:
    low, high = wilson_ci(successes, n)
    return f"[{100 * low:.1f}, {100 * high:.1f}]"


def interval_text(interval: list[float]) -> str:
    return f"[{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def table_with(test: AppTest, *columns: str) -> pd.DataFrame:
    for element in test.dataframe:
        frame = element.value
        if all(c in frame.columns for c in columns):
            return frame
    raise AssertionError(f"no table with columns {columns}")


def row_where(frame: pd.DataFrame, **match: Any) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for column, value in match.items():
        mask &= frame[column] == value
    rows = frame[mask]
    assert len(rows) == 1, f"{match}: {len(rows)} rows in\n{frame}"
    return rows.iloc[0]


def texts(elements: Any) -> list[str]:
    return [str(e.value) for e in elements]


def chart_specs(test: AppTest) -> list[dict[str, Any]]:
    """The Vega-Lite spec of every chart on the page (their data travel apart)."""
    return [json.loads(chart.proto.spec) for chart in test.get("vega_lite_chart")]


def number(cell: Any) -> float:
    """A table cell as a number: a column with an empty cell ("-") is shown as text, its
    numbers to 6 significant digits (compare with `pytest.approx(x, rel=1e-5)`)."""
    return float(cell)


def metric(test: AppTest, label: str) -> str:
    for element in test.metric:
        if element.label == label:
            return str(element.value)
    raise AssertionError(f"no metric {label!r}: {[m.label for m in test.metric]}")


def pct(rate: float) -> float:
    return round(100 * rate, 1)
