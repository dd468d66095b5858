"""Headless Chromium against a served `mars dashboard`: the helpers the browser tests
(tests/test_dashboard_browser.py, tests/test_board_browser.py), the screenshots
(dashboard/screenshots.py) and bench/dashboard_cold.py share.

`serve` starts the real command (`python -m mars dashboard --runs ROOT --port N`, on 127.0.0.1)
in its own process group and stops the whole group afterwards.

`Browser` is one headless Chromium driven over the DevTools protocol (its websocket, with the
`websockets` package Streamlit itself requires): `load` opens a URL and waits in real time until
the page is drawn (`page_ready`: Streamlit's script run over, the page's own text there, every
chart drawn) or shows an exception, then returns the DOM; `screenshot` saves the window. Waiting
in real time replaces `--virtual-time-budget`, under which a loaded machine often got Streamlit's
loading skeleton back (virtual time runs ahead while the page waits on its websocket) and had to
ask again, up to a dozen times.

`DomSummary` reads what a test or a screenshot needs from the DOM: the text (scripts and styles
left out), whether Streamlit drew an exception, whether a script run is still going, every
Altair chart with its texts, its number of drawn marks, its axes (Vega's ARIA labels: title and
scale kind, and the tick labels), its legends and the colours of its series (Streamlit draws
Vega-Lite as SVG, or on a canvas when a chart has many data points), every table with the
widths `LAYOUT` measured, and every text box `LAYOUT` found clipped. `LAYOUT` runs in the page
before each read and writes what only the layout knows as attributes of the DOM.
`layout_problems` lists what does not read right at 1400 px: a step axis that is not numeric or
ticks between steps, several series and no legend, a faint legend swatch, a table whose columns
do not fit, a clipped text box.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--no-first-run",
]
POLL_S = 0.25
DRAWN_POLL_S = 0.05  # how often `DRAWN`, a cheap question, is asked until the page may be ready
# Elements an HTML document never closes (the DOM dump writes them without an end tag).
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
_VOID |= {"track", "wbr", "param"}
_MARKS = {"path", "text", "line", "rect", "circle", "image"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_http(url: str, deadline_s: float, process: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process is not None and process.poll() is not None:
            raise RuntimeError("mars dashboard exited early")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {deadline_s} s")


def stop_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


@contextlib.contextmanager
def serve(
    root: Path,
    log: Path,
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    program: Sequence[str] | None = None,
    ready: bool = True,
) -> Iterator[str]:
    """The dashboard over `root` on a free port; yields its base URL, output in `log`.
    `program` is a command taking `--runs ROOT --port N` (the tests give `mars dashboard`);
    by default streamlit is started as `mars dashboard` starts it. With `ready` False it yields
    as soon as the command is started (`wait_ready` waits for it), so that a test can make its
    runs while the server comes up."""
    port = port or free_port()
    if program is None:
        from dashboard.launch import streamlit_command

        command = streamlit_command(root, port)
    else:
        command = [*program, "--runs", str(root), "--port", str(port)]
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            env=dict(env) if env is not None else None,
        )
    url = f"http://127.0.0.1:{port}"
    _SERVED[url] = process
    try:
        if ready:
            wait_ready(url)
        yield url
    finally:
        _SERVED.pop(url, None)
        stop_group(process)


_SERVED: dict[str, subprocess.Popen] = {}  # base URL -> the process `serve` started for it


def wait_ready(url: str, deadline_s: float = 90) -> None:
    """Until the dashboard `serve` started at `url` answers its health check."""
    wait_http(f"{url}/_stcore/health", deadline_s, _SERVED.get(url))


@dataclass
class Axis:
    """One axis of a chart, as Vega describes it (its ARIA label) and its tick labels."""

    orient: str  # "X" or "Y"
    title: str
    scale: str  # "linear", "discrete" (band, point, ordinal), "time", "log", ...
    labels: list[str] = field(default_factory=list)


@dataclass
class Chart:
    """One Altair chart of a page: its SVG's texts (title, axis labels, legend), the number of
    marks drawn in its data layers (0: an empty chart), its axes, its legends, the kinds of its
    data marks and the colours its lines, points and areas are drawn in (one per series).
    Streamlit draws a chart of many data points on a canvas instead, which shows none of them:
    `canvas` then, and the chart counts as drawn."""

    texts: list[str] = field(default_factory=list)
    marks: int = 0
    canvas: bool = False
    axes: list[Axis] = field(default_factory=list)
    legends: list[str] = field(default_factory=list)  # each legend's ARIA label
    kinds: set[str] = field(default_factory=set)  # "line", "symbol", "rect", "area", ...
    colours: set[str] = field(default_factory=set)  # of the line, symbol and area marks
    swatches: list[str] = field(default_factory=list)  # the legends' symbol colours
    heading: str = ""  # the chart's own title, if it has one

    @property
    def drawn(self) -> bool:
        return self.marks > 0 or self.canvas

    @property
    def title(self) -> str:
        """Its title, else its y axis's, to name it in a message."""
        titles = [a.title for a in self.axes if a.orient == "Y" and a.title]
        return self.heading or (titles[0] if titles else "(untitled)")


@dataclass
class Table:
    """One `st.dataframe` (drawn on a canvas): its column headers, the width its columns take
    and the width it is shown in, and its right edge against the window's width (px; -1 where
    the page's layout pass did not measure it)."""

    headers: list[str] = field(default_factory=list)
    content_px: int = -1
    shown_px: int = -1
    right_px: int = -1
    window_px: int = -1

    @property
    def cut(self) -> bool:
        """Some column lies beyond the table's edge (reached by a sideways scroll only), or the
        table beyond the window's."""
        return self.content_px > self.shown_px + 1 or self.right_px > self.window_px > 0


@dataclass
class DomSummary:
    text: str  # the document's text, scripts and styles left out, whitespace collapsed
    charts: list[Chart]
    exception: bool  # Streamlit drew an exception box (`stException`)
    running: bool  # Streamlit's status widget is up: the script run had not finished
    skeleton: bool = False  # an element still a placeholder (`stSkeleton`: its code loading)
    html: str = ""  # the DOM it was read from, when kept
    tables: list[Table] = field(default_factory=list)
    clipped: list[str] = field(default_factory=list)  # the text of each clipped text box

    def chart_with(self, text: str) -> Chart | None:
        return next((c for c in self.charts if text in c.texts), None)

    def chart_titled(self, title: str) -> Chart | None:
        return next((c for c in self.charts if c.title == title), None)


# The mark kinds a series is drawn with (a heatmap's rects and a chart's texts are not series).
_SERIES_MARKS = {"line": "stroke", "area": "fill", "symbol": "fill"}
_AXIS_LABEL = re.compile(r"^([XY])-axis(?: titled '(.*?)')? for an? (\w+) scale")


def _colour(kind: str, attributes: dict[str, str]) -> str:
    """A series mark's colour: a line's stroke, an area's or a point's fill (a hollow point's
    stroke)."""
    colour = attributes.get(_SERIES_MARKS[kind], "")
    if colour in ("", "none", "transparent") and kind == "symbol":
        colour = attributes.get("stroke", "")
    return "" if colour in ("none", "transparent") else colour.lower()


def _opacity(attributes: dict[str, str]) -> float:
    """How opaque a mark is drawn (its `opacity` times its `fill-opacity`)."""
    try:
        return float(attributes.get("opacity") or 1) * float(attributes.get("fill-opacity") or 1)
    except ValueError:
        return 1.0


def _on_white(colour: str, opacity: float) -> str:
    """The colour a `#rrggbb` mark of `opacity` shows on a white page."""
    if opacity >= 1 or not re.fullmatch(r"#[0-9a-f]{6}", colour):
        return colour
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - opacity * (255 - c)):02x}" for c in channels)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.charts: list[Chart] = []
        self.tables: list[Table] = []
        self.clipped: list[str] = []
        self.exception = False
        self.running = False
        self.skeleton = False
        # Open elements: (tag, what it opens: "chart", "marks:<kind>", "axis", "axis-labels",
        # "legend-symbol", "table", "header", "clipped" or "").
        self._open: list[tuple[str, str]] = []
        self._skip = 0

    def _inside(self, role: str) -> str | None:
        """The innermost open element's role that starts with `role`, else None."""
        return next((r for _, r in reversed(self._open) if r.startswith(role)), None)

    def _role(self, tag: str, found: dict[str, str], classes: list[str]) -> str:
        test_id = found.get("data-testid", "")
        if test_id == "stVegaLiteChart":
            self.charts.append(Chart())
            return "chart"
        if test_id == "stDataFrame":
            self.tables.append(_table(found.get("data-mars-table", "")))
            return "table"
        if "data-mars-clipped" in found:
            self.clipped.append("")
            return "clipped"
        if tag == "th" and found.get("role") == "columnheader" and self._inside("table"):
            self.tables[-1].headers.append("")
            return "header"
        if not (self.charts and self._inside("chart")):
            return ""
        return self._chart_role(tag, found, classes)

    def _chart_role(self, tag: str, found: dict[str, str], classes: list[str]) -> str:
        chart = self.charts[-1]
        if tag != "g":
            return ""
        description = found.get("aria-roledescription", "")
        if description == "axis":
            match = _AXIS_LABEL.match(found.get("aria-label", ""))
            if match:
                orient, title, scale = match.groups()
                chart.axes.append(Axis(orient, title or "", scale))
                return "axis"
        if description == "legend":
            chart.legends.append(found.get("aria-label", ""))
        if "role-axis-label" in classes and self._inside("axis"):
            return "axis-labels"
        if "role-title-text" in classes:
            return "title"
        if "role-legend-symbol" in classes:
            return "legend-symbol"
        if "role-mark" in classes:
            kind = next((c[5:] for c in classes if c.startswith("mark-")), "")
            if kind != "group":
                chart.kinds.add(kind)
                return f"marks:{kind}"
        return ""

    def _mark(self, tag: str, found: dict[str, str]) -> None:
        """Count a data mark of the chart being read, its series colour and a legend swatch."""
        if not self.charts or tag not in _MARKS:
            return
        chart = self.charts[-1]
        marks = self._inside("marks:")
        if marks is not None:
            chart.marks += 1
            kind = marks.split(":", 1)[1]
            if kind in _SERIES_MARKS and _colour(kind, found):
                chart.colours.add(_colour(kind, found))
        elif self._inside("legend-symbol") and _colour("symbol", found):
            chart.swatches.append(_on_white(_colour("symbol", found), _opacity(found)))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        test_id = found.get("data-testid", "")
        classes = found.get("class", "").split()
        self.exception |= test_id == "stException" or "stException" in classes
        self.running |= test_id == "stStatusWidget"
        self.skeleton |= test_id == "stSkeleton"
        if tag in ("script", "style"):
            self._skip += 1
        self._mark(tag, found)
        if tag == "canvas" and self._inside("chart") and self.charts:
            self.charts[-1].canvas = True
        if tag in _VOID:
            return
        self._open.append((tag, self._role(tag, found, classes)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(tag, {name: value or "" for name, value in attrs})

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.parts.append(data)
        text = data.strip()
        if not text:
            return
        if self._inside("chart") and self.charts:
            self.charts[-1].texts.append(text)
            if self._inside("axis-labels") and self.charts[-1].axes:
                self.charts[-1].axes[-1].labels.append(text)
            if self._inside("title") and not self.charts[-1].heading:
                self.charts[-1].heading = text
        if self._inside("header") and self.tables:
            self.tables[-1].headers[-1] += text
        if self._inside("clipped") and self.clipped:
            self.clipped[-1] = (self.clipped[-1] + " " + text).strip()


def _table(measured: str) -> Table:
    """A table with the widths the layout pass wrote (`LAYOUT`: "content shown right window")."""
    try:
        content, shown, right, window = (int(float(v)) for v in measured.split())
    except ValueError:
        return Table()
    return Table([], content, shown, right, window)


def read_dom(html: str, *, keep: bool = False) -> DomSummary:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    text = " ".join(" ".join(reader.parts).split())
    kept = html if keep else ""
    return DomSummary(
        text,
        reader.charts,
        reader.exception,
        reader.running,
        reader.skeleton,
        kept,
        reader.tables,
        reader.clipped,
    )


def dom_text(html: str) -> str:
    return read_dom(html).text


# Titles of the axes that count steps: such an axis of a chart over steps must be numeric.
STEP_TITLES = ("step", "iteration", "round", "checkpoint_step", "checkpoint")
# The marks of a chart over steps (a heatmap's columns may be its checkpoints, as categories).
_OVER_STEPS = {"line", "area", "symbol"}
MIN_CONTRAST = 3.0  # WCAG's least contrast for graphics, a legend swatch against white


def step_axis_problems(chart: Chart) -> list[str]:
    """A chart over steps whose step axis is not numeric, or ticks between whole steps."""
    if not chart.kinds & _OVER_STEPS:
        return []
    problems = []
    for axis in chart.axes:
        if axis.orient != "X" or axis.title not in STEP_TITLES:
            continue
        if axis.scale != "linear":
            problems.append(f"its {axis.title} axis is {axis.scale}, not numeric")
        elif any(not _whole(label) for label in axis.labels):
            problems.append(f"its {axis.title} axis ticks between steps: {axis.labels}")
    return problems


def _whole(label: str) -> bool:
    try:
        return float(label.replace("\u2212", "-").replace(",", "")).is_integer()
    except ValueError:
        return False


def contrast(colour: str) -> float:
    """WCAG contrast ratio of a `#rrggbb` colour against white (1 for anything else)."""
    if not re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        return 1.0
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 1.05 / (luminance + 0.05)


def chart_problems(chart: Chart) -> list[str]:
    """What reads wrong in a drawn chart: a step axis that is not numeric, several series with
    no legend, a legend swatch hard to see on white."""
    problems = step_axis_problems(chart)
    if len(chart.colours) > 1 and not chart.legends:
        problems.append(f"{len(chart.colours)} series and no legend")
    faint = sorted({c for c in chart.swatches if contrast(c) < MIN_CONTRAST})
    if faint:
        problems.append(f"legend swatches barely visible on white: {faint}")
    return [f"chart {chart.title!r}: {p}" for p in problems]


def layout_problems(dom: DomSummary) -> list[str]:
    """Every chart, table and text box of a page that does not read right at the window's width:
    `chart_problems`, a table whose columns do not fit (`Table.cut`), a clipped text box."""
    problems = [p for chart in dom.charts if chart.drawn for p in chart_problems(chart)]
    for table in dom.tables:
        if table.cut:
            problems.append(
                f"table {table.headers[:3]}: {table.content_px} px of columns shown in "
                f"{table.shown_px} px (right edge {table.right_px} of {table.window_px})"
            )
    problems += [f"clipped text box: {text[:80]!r}" for text in dom.clipped]
    return problems


# True in the page once it may be ready, cheap to ask at every poll: no script run going, no
# element still a placeholder, every chart with a mark drawn (or on a canvas); or an exception.
DRAWN = """(() => {
  if (document.querySelector('[data-testid="stException"], .stException')) return true;
  if (document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]')) {
    return false;
  }
  const marks = ['path', 'text', 'line', 'rect', 'circle', 'image']
    .map((tag) => `g.role-mark ${tag}`).join(', ');
  return [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
    .every((chart) => chart.querySelector('canvas') || chart.querySelector(marks));
})()"""


# Run in the page before its DOM is read: writes what only the layout knows as attributes that
# `read_dom` reads: on each table (`stDataFrame`) the width of its columns, the width it is
# shown in, its right edge and the window's width; on each text box whose text is cut off
# (scrolled or hidden beyond its edge: code and text blocks, metrics, text areas)
# `data-mars-clipped`. Then it returns the DOM.
LAYOUT = """(() => {
  for (const table of document.querySelectorAll('[data-testid="stDataFrame"]')) {
    const scroller = table.querySelector('.dvn-scroller');
    if (!scroller) continue;
    const right = Math.round(table.getBoundingClientRect().right);
    const widths = [scroller.scrollWidth, scroller.clientWidth, right, window.innerWidth];
    table.setAttribute('data-mars-table', widths.join(' '));
  }
  const boxes = '[data-testid="stCode"] pre, [data-testid="stText"], textarea, '
    + '.stMarkdownEllipsis, [data-testid="stMarkdownContainer"] pre';
  for (const box of document.querySelectorAll(boxes)) {
    const style = getComputedStyle(box);
    const wide = style.overflowX !== 'visible' && box.scrollWidth > box.clientWidth + 1;
    const tall = style.overflowY !== 'visible' && box.scrollHeight > box.clientHeight + 1;
    const shifted = box.scrollTop > 0 || box.scrollLeft > 0;
    if (wide || tall || shifted) box.setAttribute('data-mars-clipped', '');
    else box.removeAttribute('data-mars-clipped');
  }
  return document.documentElement.outerHTML;
})()"""


def page_ready(dom: DomSummary, needles: list[str]) -> bool:
    """The page's run finished and drew its own text, every element and every chart's marks."""
    return (
        not dom.running
        and not dom.skeleton
        and all(n in dom.text for n in needles)
        and all(c.drawn for c in dom.charts)
    )


class Browser:
    """One headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, profile: Path, *, height: int = 1600) -> None:
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                *BROWSER_FLAGS,
                f"--window-size={WIDTH},{height}",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._ids = 0
        self._url = "about:blank"
        try:
            self._socket = connect(self._page_socket(profile), max_size=None, open_timeout=30)
        except BaseException:
            stop_group(self.process)
            raise

    def _page_socket(self, profile: Path) -> str:
        """The page's DevTools websocket (the port is in the profile's DevToolsActivePort)."""
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            with contextlib.suppress(OSError, ValueError, IndexError):
                port = int((profile / "DevToolsActivePort").read_text().split()[0])
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as reply:
                    pages = [t for t in json.load(reply) if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.05)
        raise TimeoutError("Chromium's DevTools endpoint did not come up within 30 s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command and its result (events that arrive meanwhile are dropped)."""
        self._ids += 1
        self._socket.send(json.dumps({"id": self._ids, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=120))
            if message.get("id") == self._ids:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (None when it throws)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def navigate(self, url: str, *, height: int | None = None) -> None:
        """Open `url` (the window `height` px tall if given); until the new document is there,
        `evaluate` on `fresh(...)` is null."""
        if height is not None:
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=WIDTH,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        if "#" in url and url.split("#")[0] == self._url.split("#")[0]:
            # Only the fragment would change: the browser would stay in the same document.
            self.call("Page.navigate", url="about:blank")
            self.wait_for("document.readyState === 'complete'", 30)
        self.evaluate("window.__marsOld = true")
        self.call("Page.navigate", url=url)
        self._url = url

    def wait_for(self, condition: str, timeout_s: float, poll_s: float = POLL_S) -> bool:
        """Whether the JavaScript `condition` held in the new document within `timeout_s`."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.evaluate(fresh(f"Boolean({condition})")) is True:
                return True
            time.sleep(poll_s)
        return False

    def load(
        self, url: str, needles: list[str], *, height: int | None = None, timeout_s: float = 120
    ) -> DomSummary:
        """Open `url` and wait until the page is drawn (`page_ready`) or shows an exception;
        the DOM as it is then (past the timeout: as it is, not ready)."""
        self.navigate(url, height=height)
        end = time.monotonic() + timeout_s
        dom = DomSummary("", [], exception=False, running=True)
        settled = ""  # the text of the last poll that found the page ready
        while time.monotonic() < end:
            # The DOM is read (and the layout measured) only once the page may be ready: a
            # large page read at every poll took CPU from the server and the page drawing it.
            if self.evaluate(fresh(DRAWN)) is not True:
                time.sleep(DRAWN_POLL_S)
                continue
            html = self.evaluate(fresh(LAYOUT))
            if isinstance(html, str):
                dom = read_dom(html, keep=True)
                if dom.exception:
                    return dom
                # Ready twice in a row with the same text: nothing is still being added.
                if page_ready(dom, needles) and dom.text == settled:
                    return dom
                settled = dom.text if page_ready(dom, needles) else ""
            time.sleep(POLL_S)
        html = self.evaluate(fresh(LAYOUT))  # not ready in time: the page as it is, to say why
        return read_dom(html, keep=True) if isinstance(html, str) else dom

    def screenshot(self, png: Path) -> None:
        """The window as a PNG."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        png.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._socket.close()
        stop_group(self.process)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fresh(expression: str) -> str:
    """JavaScript: `expression` in the document `Browser.navigate` opened, null before it."""
    return f"(window.__marsOld ? null : ({expression}))"
