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

What is read from the DOM, and what does not read right at 1400 px, is dashboard/dom.py's
(`DomSummary`, `read_dom`, `layout_problems`). `LAYOUT` runs in the page before each read and
writes what only the layout knows (table widths, clipped boxes) as attributes of the DOM.
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
from pathlib import Path
from typing import Any

from dashboard.dom import DomSummary, read_dom

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
