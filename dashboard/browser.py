"""Headless Chromium against a served `mars dashboard`: the helpers the browser test
(tests/test_dashboard_browser.py) and the screenshots (dashboard/screenshots.py) share.

`serve` starts the real command (`python -m mars dashboard --runs ROOT --port N`, on 127.0.0.1)
in its own process group and stops the whole group afterwards. `capture` opens one URL with one
Chromium call that both dumps the DOM (stdout) and saves a screenshot of the window, with
`--virtual-time-budget`: virtual time runs fast while the page only waits on its websocket, so a
page whose script run is slow (the server's first imports, a page's first read of its files) can
come back as Streamlit's loading skeleton; `page_ready` tells such a capture from a rendered one,
and callers ask again after a pause.

`DomSummary` reads what a test or a screenshot needs from the DOM: the text (scripts and styles
left out), whether Streamlit drew an exception, whether a script run is still going, and every
Altair chart with its texts and its number of drawn marks (Streamlit draws Vega-Lite as SVG, or
on a canvas when a chart has many data points).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--virtual-time-budget=15000",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
]
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
) -> Iterator[str]:
    """`mars dashboard --runs root` on a free port; yields its base URL, output in `log`."""
    port = port or free_port()
    command = [sys.executable, "-m", "mars", "dashboard", "--runs", str(root), "--port", str(port)]
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            env=dict(env) if env is not None else None,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", 90, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(process)


def capture(url: str, png: Path, profile: Path, *, height: int = 1600) -> str:
    """One Chromium call: the DOM after the virtual-time budget (returned), and a screenshot of
    the `WIDTH` x `height` window saved to `png`."""
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    png.unlink(missing_ok=True)
    result = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            f"--window-size={WIDTH},{height}",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        start_new_session=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"chromium exited with {result.returncode}: {result.stderr[-2000:]}")
    return result.stdout


@dataclass
class Chart:
    """One Altair chart of a page: its SVG's texts (title, axis labels, legend) and the number
    of marks drawn in its data layers (0: an empty chart). Streamlit draws a chart of many data
    points on a canvas instead, which shows neither: `canvas` then, and the chart counts as
    drawn."""

    texts: list[str] = field(default_factory=list)
    marks: int = 0
    canvas: bool = False

    @property
    def drawn(self) -> bool:
        return self.marks > 0 or self.canvas


@dataclass
class DomSummary:
    text: str  # the document's text, scripts and styles left out, whitespace collapsed
    charts: list[Chart]
    exception: bool  # Streamlit drew an exception box (`stException`)
    running: bool  # Streamlit's status widget is up: the script run had not finished

    def chart_with(self, text: str) -> Chart | None:
        return next((c for c in self.charts if text in c.texts), None)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.charts: list[Chart] = []
        self.exception = False
        self.running = False
        # Open elements: (tag, opens a chart, opens a group of data marks).
        self._open: list[tuple[str, bool, bool]] = []
        self._skip = 0

    def _inside(self, index: int) -> bool:
        return any(entry[index] for entry in self._open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        test_id = found.get("data-testid", "")
        classes = found.get("class", "").split()
        self.exception |= test_id == "stException" or "stException" in classes
        self.running |= test_id == "stStatusWidget"
        if tag in ("script", "style"):
            self._skip += 1
        if self._inside(2) and tag in _MARKS and self.charts:
            self.charts[-1].marks += 1
        if tag == "canvas" and self._inside(1) and self.charts:
            self.charts[-1].canvas = True
        if tag in _VOID:
            return
        chart = test_id == "stVegaLiteChart"
        if chart:
            self.charts.append(Chart())
        mark_group = tag == "g" and "role-mark" in classes and self._inside(1)
        self._open.append((tag, chart, mark_group))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._inside(2) and tag in _MARKS and self.charts:
            self.charts[-1].marks += 1

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
        if self._inside(1) and self.charts and data.strip():
            self.charts[-1].texts.append(data.strip())


def read_dom(html: str) -> DomSummary:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    text = " ".join(" ".join(reader.parts).split())
    return DomSummary(text, reader.charts, reader.exception, reader.running)


def dom_text(html: str) -> str:
    return read_dom(html).text


def page_ready(dom: DomSummary, needles: list[str]) -> bool:
    """The page's run finished and drew its own text and every chart's marks."""
    return (
        not dom.running and all(n in dom.text for n in needles) and all(c.drawn for c in dom.charts)
    )
