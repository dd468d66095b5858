"""A real browser against `mars dashboard`: headless Chromium renders each page of the served app.

The app is started with the real command (`python -m mars dashboard --runs ROOT --port N`, on
127.0.0.1) over the run directories of dashboard_runs.py (made by `mars eval`, `mars failures`,
`mars arena`, `mars train`; the training run also measures Kuhn exploitability, so the Training
page draws the policy against equilibrium). One headless Chromium (`--no-sandbox --disable-gpu
--disable-background-networking`), driven over the DevTools protocol by dashboard/browser.py
(shared with dashboard/screenshots.py), opens each page by URL (`?page=<slug>`, the Compare page
with `&a=eval-base&b=eval-trained`, the Games page with `&run=arena-ttt`) and waits in real time
until Streamlit's script run is over and the page's own text, every element (no placeholder left)
and every chart are drawn (or an exception is), then keeps the DOM and a 1400 x 1600 screenshot
under test-artifacts/dashboard/ at the repository root.

The test fails on a Streamlit exception, on a page that lacks its own text, on an empty chart
(every page's charts have data here), on a missing Kuhn state label in the policy heatmap, and on
a blank screenshot. (Before, each page was one `--dump-dom --screenshot` call under
`--virtual-time-budget`; on a loaded machine that often returned Streamlit's loading skeleton and
a page was asked for up to twelve times.)
"""

from __future__ import annotations

import io
import shutil
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, REPO, mars_env
from dashboard_runs import RealRuns, shared_runs

from dashboard.browser import CHROMIUM, Browser, DomSummary, dom_text, page_ready, read_dom, serve

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
    "games": "page=games&run=arena-ttt",
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
    ],
    "training": [
        "reward_mean",
        "Exploitability (0 = a Nash equilibrium)",
        "Win rate against each opponent",
        "Policy against equilibrium",
        "Best response per state",
        "Learning curve (train",  # (markdown draws "->" as an arrow)
        "mars loop --watch",
    ],
    "inspector": ["Training inspector", "Collapse signals per step", "branches at"],
}
# A chart each page must draw, named by a text of its SVG (a title or an axis title).
CHARTS = {
    "runs": ["accuracy %"],
    "compare": ["tokens per question (prompt + completion)"],
    "failure-modes": [],
    "training": ["reward_mean", "exploitability", "win rate", "train-ttt · kuhn_poker"],
}
# Kuhn's 12 information states as the policy heatmap labels them (player, moves so far, card).
KUHN_LABELS = [
    f"P{seat} {history} {card}"
    for seat, history in ((0, "-"), (0, "pb"), (1, "p"), (1, "b"))
    for card in "JQK"
]
LOAD_TIMEOUT_S = 120


def _ink(png: Path) -> tuple[float, float, tuple[int, int]]:
    """(grey-level standard deviation, share of dark pixels, size) of a screenshot."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png.read_bytes())).convert("L")
    dark = sum(image.histogram()[:100]) / (image.size[0] * image.size[1])
    return ImageStat.Stat(image).stddev[0], dark, image.size


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RealRuns:
    return shared_runs(tmp_path_factory)


def test_each_page_renders_in_headless_chromium(
    runs: RealRuns, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    seen: dict[str, DomSummary] = {}
    log = ARTIFACTS / "dashboard.log"
    with (
        serve(runs.root, log, env=mars_env(), cwd=REPO, program=MARS_DASHBOARD) as url,
        Browser(tmp_path / "profile") as browser,
    ):
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
                print(
                    f"\n  dashboard {slug}: {png} ({time.perf_counter() - started:.1f} s)", end=""
                )

    for slug, needles in EXPECTED.items():
        dom, png = seen[slug], ARTIFACTS / f"{slug}.png"
        assert not dom.exception, f"{slug}: Streamlit drew an exception: {dom.text[-1500:]!r}"
        assert "Traceback" not in dom.text, f"{slug}: a traceback on the page"
        missing = [n for n in needles if n not in dom.text]
        assert not missing, f"{slug}: {missing} not in the DOM; it showed {dom.text[:600]!r}"
        assert f"4 runs under {runs.root}" in dom.text  # the sidebar: every run was found
        empty = [c.texts[:4] for c in dom.charts if not c.drawn]
        assert not empty, f"{slug}: charts drawn without a mark although their data exists: {empty}"
        absent = [t for t in CHARTS.get(slug, []) if dom.chart_with(t) is None]
        assert not absent, f"{slug}: no chart with {absent}"
        spread, dark, size = _ink(png)
        assert size == (1400, HEIGHT)
        assert spread > 10, f"{slug}: the screenshot is (nearly) uniform"
        assert dark > 0.002, f"{slug}: no dark (text) pixels: the page did not render"
    # Pages differ: each shows its own header, not the Runs page again.
    assert "Outcomes per opponent and seat" not in seen["runs"].text
    assert "Accuracy by suite x MAS x model" not in seen["games"].text
    # The policy against equilibrium: every Kuhn state is a row of the heatmap, with its range.
    heatmap = seen["training"].chart_with("train-ttt · kuhn_poker")
    assert heatmap is not None and not heatmap.canvas
    missing = [label for label in KUHN_LABELS if label not in heatmap.texts]
    assert not missing, f"states missing from the policy heatmap: {missing}"
    assert "Nash" in heatmap.texts
    assert "[0.33, 0.67]" in heatmap.texts  # P0 pb Q: call with alpha + 1/3


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
