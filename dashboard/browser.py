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
left out), whether Streamlit drew an exception, whether a script run is still going, and every
Altair chart with its texts and its number of drawn marks (Streamlit draws Vega-Lite as SVG, or
on a canvas when a chart has many data points).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
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
) -> Iterator[str]:
    """The dashboard over `root` on a free port; yields its base URL, output in `log`.
    `program` is a command taking `--runs ROOT --port N` (the tests give `mars dashboard`);
    by default streamlit is started as `mars dashboard` starts it."""
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
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", 90, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(process)


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
    skeleton: bool = False  # an element still a placeholder (`stSkeleton`: its code loading)
    html: str = ""  # the DOM it was read from, when kept

    def chart_with(self, text: str) -> Chart | None:
        return next((c for c in self.charts if text in c.texts), None)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.charts: list[Chart] = []
        self.exception = False
        self.running = False
        self.skeleton = False
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
        self.skeleton |= test_id == "stSkeleton"
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


def read_dom(html: str, *, keep: bool = False) -> DomSummary:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    text = " ".join(" ".join(reader.parts).split())
    kept = html if keep else ""
    return DomSummary(text, reader.charts, reader.exception, reader.running, reader.skeleton, kept)


def dom_text(html: str) -> str:
    return read_dom(html).text


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
            html = self.evaluate(fresh("document.documentElement.outerHTML"))
            if isinstance(html, str):
                dom = read_dom(html, keep=True)
                if dom.exception:
                    return dom
                # Ready twice in a row with the same text: nothing is still being added.
                if page_ready(dom, needles) and dom.text == settled:
                    return dom
                settled = dom.text if page_ready(dom, needles) else ""
            time.sleep(POLL_S)
        return dom

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
