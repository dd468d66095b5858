"""A real browser against `mars dashboard`: headless Chromium renders each page of the served app.

The app is started with the real command (`python -m mars dashboard --runs ROOT --port N`, on
127.0.0.1) over the run directories of dashboard_runs.py (made by `mars eval`, `mars failures`,
`mars arena`, `mars train`, `mars experiment`; the training run also measures Kuhn
exploitability), with two train runs at once: that one and a Leduc run without exploitability
(`browser_runs`). One headless Chromium (`--no-sandbox --disable-gpu
--disable-background-networking`), driven over the DevTools protocol by dashboard/browser.py
(shared with dashboard/screenshots.py), opens every page by URL (`?page=<slug>`, the Compare page
with `&a=eval-base&b=eval-trained`, the Games page with `&run=arena-ttt&turn=1`, the model's
turn, so the state it saw is on screen) and waits in real time until Streamlit's script run is
over and the page's own text, every element (no placeholder left) and every chart are drawn (or
an exception is), then keeps the DOM and a 1400 x 1600 screenshot under test-artifacts/dashboard/
at the repository root.

The test fails on a Streamlit exception, on a page that lacks its own text, on an empty chart
(every page's charts have data here), on a missing Kuhn or Leduc state in the policy heatmaps,
on a blank screenshot, and on what `layout_problems` finds: a chart over steps whose step axis is
not numeric or ticks between steps, a chart of several series without a legend, a legend swatch
hard to see on white, a table whose columns do not fit the page at 1400 px, a clipped text box.
The unit tests below show each of those checks catch its defect on a crafted DOM, and the
layout pass (what only a browser measures) on a crafted page.
"""

from __future__ import annotations

import io
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import DATA_DIR, REPO, mars_env
from dashboard_runs import BrowserRuns, browser_runs, browser_runs_started, shared_runs

from dashboard.browser import CHROMIUM, LAYOUT, Browser, page_ready, serve, wait_ready
from dashboard.dom import DomSummary, contrast, dom_text, layout_problems, read_dom

# The browser tests start the dashboard as a user does: `mars dashboard`.
MARS_DASHBOARD = [sys.executable, "-m", "mars", "dashboard"]

ARTIFACTS = REPO / "test-artifacts" / "dashboard"
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (`make test` installs it as root)"
    ),
    pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found"),
]
HEIGHT = 1600
# The query of each page (its ?page= slug) that is more than `page=<slug>`.
QUERIES = {
    "compare": "page=compare&a=eval-base&b=eval-trained",
    "games": "page=games&run=arena-ttt&turn=1",
}
# Per page: text the page itself renders (tables draw their cells on a canvas, so the needles are
# headings, notes, metrics, widget labels and the charts' SVG text).
EXPECTED = {
    "runs": [
        "Accuracy by suite x MAS x model",
        "Game results by seat",
        "1 malformed line skipped in eval-base/records.jsonl",
        "eval-trained",
    ],
    "samples": ["matching samples", "accuracy of matches", "chain of thought", "agent_1"],
    "compare": [
        "Sample by sample",
        "A right, B wrong",
        "McNemar p",
        "A: eval-base",
        "B: eval-trained",
        "Calls and tokens beside accuracy",
        "Accuracy against tokens per question, eval runs",
    ],
    "failure-modes": [
        "Failure modes (MAST)",
        "Per category",
        "eval-trained minus eval-base",
        "Transcripts behind a bar",
    ],
    "games": [
        "Outcomes per opponent and seat",
        "normalised return per seat",
        "Replay",
        "arena-ttt",
        "state as the seat saw it",
    ],
    "training": [
        "reward_mean",
        "Exploitability (0 = a Nash equilibrium)",
        "Win rate against each opponent",
        "Policy against equilibrium",
        "train-leduc · leduc_poker",
        "Best response per state",
        "Learning curve (train",  # (markdown draws "->" as an arrow)
        "mars loop --watch",
    ],
    "inspector": ["Training inspector", "Collapse signals per step", "branches at"],
    "experiments": ["A miniature for the dashboard", "Other evaluations", "mars arena"],
}
# A chart each page must draw, named by a text of its SVG (a title or an axis title).
CHARTS = {
    "runs": ["accuracy %"],
    "compare": ["tokens per question (prompt + completion)"],
    "failure-modes": [],
    "training": [
        "reward_mean",
        "exploitability",
        "win rate",
        "train-ttt · kuhn_poker",
        "train-leduc · leduc_poker",
    ],
}
# Kuhn's 12 information states as the policy heatmap labels them (player, moves so far, card);
# Leduc's rows: each private card's share of each action.
KUHN_LABELS = [
    f"P{seat} {history} {card}"
    for seat, history in ((0, "-"), (0, "pb"), (1, "p"), (1, "b"))
    for card in "JQK"
]
LEDUC_LABELS = [f"card {card} · {move}" for card in "JQK" for move in ("FOLD", "CALL", "RAISE")]
LOAD_TIMEOUT_S = 120


def _ink(png: Path) -> tuple[float, float, tuple[int, int]]:
    """(grey-level standard deviation, share of dark pixels, size) of a screenshot."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png.read_bytes())).convert("L")
    dark = sum(image.histogram()[:100]) / (image.size[0] * image.size[1])
    return ImageStat.Stat(image).stddev[0], dark, image.size


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, BrowserRuns]]:
    """`mars dashboard` over the runs of `browser_runs`, started before they are made (its
    start-up overlaps their making, most of it waiting on `mars` processes): its base URL and
    the runs."""
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    root = tmp_path_factory.mktemp("dashboard-browser") / "runs"
    started = browser_runs_started(root)
    log = ARTIFACTS / "dashboard.log"
    # the pages' remembered runs in a file of this test's own, not the machine's cache
    state = f"{root.parent / 'dashboard-state.json'}"
    env = mars_env(MARS_DASHBOARD_STATE=state)
    with serve(root, log, env=env, cwd=REPO, program=MARS_DASHBOARD, ready=False) as url:
        runs = browser_runs(shared_runs(tmp_path_factory), root, started)
        wait_ready(url)
        yield url, runs


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser(tmp_path_factory.mktemp("chromium") / "profile") as opened:
        yield opened


def test_the_layout_pass_measures_tables_and_clipped_boxes(browser: Browser) -> None:
    """What only a browser knows, measured on a crafted page: a table whose columns need more
    room than it has, and a text box that hides part of its text; their fitting twins pass."""
    line = "a line too long for its box " * 8
    page = (
        "<body style='margin:0'>"
        "<div data-testid='stDataFrame' style='width:300px'><div class='dvn-scroller' "
        "style='width:300px;overflow:auto'><div style='width:520px;height:8px'></div></div></div>"
        "<div data-testid='stDataFrame' style='width:300px'><div class='dvn-scroller' "
        "style='width:300px;overflow:auto'><div style='width:280px;height:8px'></div></div></div>"
        f"<div data-testid='stCode' style='width:200px'><pre style='overflow:auto'>{line}</pre>"
        f"</div><div data-testid='stCode' style='width:200px'><pre style='overflow:auto;"
        f"white-space:pre-wrap'>wrapped: {line}</pre></div>"
        "<div data-testid='stText' style='height:20px;overflow:hidden'>one<br>two<br>three</div>"
        "</body>"
    )
    browser.navigate("data:text/html," + quote(page))
    assert browser.wait_for("document.querySelectorAll('pre').length === 2", 30)
    dom = read_dom(browser.evaluate(LAYOUT))
    wide, fitting = dom.tables
    assert (wide.content_px, wide.shown_px, wide.cut) == (520, 300, True)
    assert fitting.shown_px == 300 and not fitting.cut
    assert dom.clipped == [line.strip(), "one two three"]  # not the wrapped one
    assert len(layout_problems(dom)) == 3


def test_each_page_renders_in_headless_chromium(
    served: tuple[str, BrowserRuns], browser: Browser, capsys: pytest.CaptureFixture[str]
) -> None:
    url, runs = served
    seen: dict[str, DomSummary] = {}
    for slug, needles in EXPECTED.items():
        png = ARTIFACTS / f"{slug}.png"
        started = time.perf_counter()
        query = QUERIES.get(slug, f"page={slug}")
        seen[slug] = browser.load(
            f"{url}/?{query}", needles, height=HEIGHT, timeout_s=LOAD_TIMEOUT_S
        )
        browser.screenshot(png)
        (ARTIFACTS / f"{slug}.html").write_text(seen[slug].html, encoding="utf-8")
        with capsys.disabled():
            print(f"\n  dashboard {slug}: {png} ({time.perf_counter() - started:.1f} s)", end="")

    for slug, needles in EXPECTED.items():
        dom, png = seen[slug], ARTIFACTS / f"{slug}.png"
        assert not dom.exception, f"{slug}: Streamlit drew an exception: {dom.text[-1500:]!r}"
        assert "Traceback" not in dom.text, f"{slug}: a traceback on the page"
        missing = [n for n in needles if n not in dom.text]
        assert not missing, f"{slug}: {missing} not in the DOM; it showed {dom.text[:600]!r}"
        assert f"6 runs under {runs.root}" in dom.text  # the sidebar: every run was found
        empty = [c.texts[:4] for c in dom.charts if not c.drawn]
        assert not empty, f"{slug}: charts drawn without a mark although their data exists: {empty}"
        absent = [t for t in CHARTS.get(slug, []) if dom.chart_with(t) is None]
        assert not absent, f"{slug}: no chart with {absent}"
        problems = layout_problems(dom)
        assert not problems, f"{slug} at 1400 px: {problems}"
        spread, dark, size = _ink(png)
        assert size == (1400, HEIGHT)
        assert spread > 10, f"{slug}: the screenshot is (nearly) uniform"
        assert dark > 0.002, f"{slug}: no dark (text) pixels: the page did not render"
    # Pages differ: each shows its own header, not the Runs page again.
    assert "Outcomes per opponent and seat" not in seen["runs"].text
    assert "Accuracy by suite x MAS x model" not in seen["games"].text
    _training_page_holds_every_run(seen["training"], runs)


def _training_page_holds_every_run(dom: DomSummary, runs: BrowserRuns) -> None:
    """Two train runs at once, one without exploitability: every chart over steps on one
    numeric step axis of whole steps (checked by `layout_problems`), each run a series with a
    legend, the policy and its average two series of the exploitability chart, both policy
    heatmaps in full."""
    loss = dom.chart_titled("loss")
    assert loss is not None and len(loss.colours) == len(runs.train_runs)
    exploitability = dom.chart_titled("exploitability")
    assert exploitability is not None and exploitability.legends
    # The policy and its average, each a series of its own colour.
    assert len(exploitability.colours) == 2
    assert "train-ttt · kuhn_poker (average policy)" in exploitability.texts
    steps = {a.title: a for a in exploitability.axes}["step"]
    assert steps.labels == [str(step) for step in range(5)]  # the Leduc run's 0-4 for all
    kuhn = dom.chart_titled("train-ttt · kuhn_poker")
    assert kuhn is not None and not kuhn.canvas
    missing = [label for label in KUHN_LABELS if label not in kuhn.texts]
    assert not missing, f"states missing from the policy heatmap: {missing}"
    assert "Nash" in kuhn.texts
    assert "[0.33, 0.67]" in kuhn.texts  # P0 pb Q: call with alpha + 1/3
    leduc = dom.chart_titled("train-leduc · leduc_poker")
    assert leduc is not None and all(label in leduc.texts for label in LEDUC_LABELS)
    assert "states outside the equilibrium" in dom.text  # the deviations, listed


def test_dom_text_leaves_scripts_out() -> None:
    html = "<html><script>var page = 'Runs';</script><body><h1>Games</h1><p>a <b>b</b></p></body>"
    assert dom_text(html) == "Games a b"


def test_read_dom_finds_exceptions_running_scripts_and_empty_charts() -> None:
    chart = (
        '<div data-testid="stVegaLiteChart"><svg><g class="mark-group role-axis"><text>x</text>'
        '</g><g class="mark-rect role-mark layer_0_marks">{marks}</g><text>title</text></svg></div>'
    )
    html = (
        '<body><meta charset="utf-8"><div data-testid="stStatusWidget">Running...</div>'
        + chart.format(marks='<path d="M0,0h1v1Z"></path><path d="M1,1h1v1Z"></path>')
        + chart.format(marks="")
        + '<div class="stException">ValueError</div></body>'
    )
    dom = read_dom(html)
    assert [c.marks for c in dom.charts] == [2, 0]
    assert dom.charts[0].texts == ["x", "title"]
    assert dom.exception and dom.running
    assert not page_ready(dom, ["title"])
    placeholder = read_dom('<div data-testid="stSkeleton"></div><p>title</p>')
    assert placeholder.skeleton and not page_ready(placeholder, ["title"])
    assert page_ready(read_dom(chart.format(marks="<path></path>")), ["title"])
    assert not read_dom("<body><p>fine</p></body>").exception
    drawn = read_dom('<div data-testid="stVegaLiteChart"><canvas width="9"></canvas></div>')
    assert drawn.charts[0].canvas and drawn.charts[0].drawn and drawn.charts[0].marks == 0


def _svg_chart(
    *,
    x_axis: str = "X-axis titled 'step' for a linear scale with values from 1 to 2",
    ticks: tuple[str, ...] = ("1", "2"),
    lines: tuple[str, ...] = ("#1f77b4",),
    legend: tuple[str, ...] | None = None,
    opacity: str = "1",
) -> str:
    """A chart as Streamlit's Vega draws it in SVG: the x axis (its ARIA label and tick labels),
    one line per colour, and a legend with one swatch per colour (None: no legend)."""
    labels = "".join(f"<text>{t}</text>" for t in ticks)
    paths = "".join(f'<path d="M0,0L9,9" stroke="{c}"></path>' for c in lines)
    swatches = "".join(
        f'<g class="mark-symbol role-legend-symbol"><path fill="{c}" stroke="{c}" '
        f'opacity="{opacity}"></path></g><g class="mark-text role-legend-label"><text>s{i}</text>'
        "</g>"
        for i, c in enumerate(legend or ())
    )
    legend_group = (
        f'<g class="mark-group role-legend" aria-roledescription="legend" aria-label="Symbol '
        f'legend with {len(legend)} values">{swatches}</g>'
        if legend is not None
        else ""
    )
    return (
        '<div data-testid="stVegaLiteChart"><svg><g class="mark-group role-title"><g '
        'class="mark-text role-title-text"><text>loss</text></g></g>'
        f'<g class="mark-group role-axis" aria-roledescription="axis" aria-label="{x_axis}">'
        f'<g class="mark-text role-axis-label">{labels}</g></g>'
        f'<g class="mark-line role-mark layer_0_marks">{paths}</g>{legend_group}</svg></div>'
    )


def test_a_step_axis_of_categories_or_half_steps_is_caught() -> None:
    good = read_dom(_svg_chart())
    assert layout_problems(good) == []
    assert good.charts[0].axes[0].labels == ["1", "2"] and good.charts[0].title == "loss"
    # Steps as categories: what concatenating a run without exploitability did.
    categories = "X-axis titled 'step' for a discrete scale with 2 values: 1, 2"
    (problem,) = layout_problems(read_dom(_svg_chart(x_axis=categories)))
    assert "step axis is discrete, not numeric" in problem and "'loss'" in problem
    # One run: a numeric axis, ticked every half step.
    (problem,) = layout_problems(read_dom(_svg_chart(ticks=("1.0", "1.5", "2.0"))))
    assert "ticks between steps" in problem
    # A heatmap's checkpoint columns are categories by design (no line, area or point).
    heatmap = _svg_chart(x_axis=categories).replace("mark-line", "mark-rect")
    assert layout_problems(read_dom(heatmap)) == []


def test_several_series_without_a_legend_and_faint_swatches_are_caught() -> None:
    two = ("#1f77b4", "#d62728")
    assert layout_problems(read_dom(_svg_chart(lines=two, legend=two))) == []
    (problem,) = layout_problems(read_dom(_svg_chart(lines=two)))
    assert "2 series and no legend" in problem
    # Streamlit's own second colour, and a legend that took a band's opacity.
    (problem,) = layout_problems(read_dom(_svg_chart(lines=two, legend=("#0068c9", "#83c9ff"))))
    assert "barely visible" in problem and "#83c9ff" in problem and "#0068c9" not in problem
    (problem,) = layout_problems(read_dom(_svg_chart(lines=two, legend=two, opacity="0.2")))
    assert "barely visible" in problem
    assert contrast("#ffffff") == pytest.approx(1) and contrast("#000000") == pytest.approx(21)


def test_a_table_too_wide_and_a_clipped_box_are_caught() -> None:
    table = (
        '<div data-testid="stDataFrame" data-mars-table="{}"><table><thead><tr>'
        '<th role="columnheader">run</th><th role="columnheader">kl</th></tr></thead></table>'
        "</div>"
    )
    fits = read_dom(table.format("900 938 1320 1400"))
    assert fits.tables[0].headers == ["run", "kl"] and layout_problems(fits) == []
    (problem,) = layout_problems(read_dom(table.format("1322 938 1320 1400")))
    assert "['run', 'kl']: 1322 px of columns shown in 938 px" in problem
    (problem,) = layout_problems(read_dom(table.format("900 938 1500 1400")))  # off the window
    assert "right edge 1500 of 1400" in problem
    assert not read_dom(table.format("")).tables[0].cut  # not measured: nothing to say
    box = '<div data-testid="stCode"><pre data-mars-clipped=""><code>Kuhn: J&lt;Q</code></pre>'
    (problem,) = layout_problems(read_dom(box + "</div>"))
    assert problem == "clipped text box: 'Kuhn: J<Q'"
