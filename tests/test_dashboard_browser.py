"""A real browser against `mars dashboard`: headless Chromium loads the served app and we check
the rendered page and its screenshot.

Chromium's one-shot `--screenshot --virtual-time-budget=...` captures Streamlit's loading skeleton
with Streamlit 1.67 / Chromium 156 (virtual time runs out before the app's websocket delivers the
page), so the test drives Chromium over the DevTools protocol instead: it waits in real time until
the app has rendered, then captures the screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboard import synthetic

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_http(url: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {deadline_s} s")


def _stop_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


@contextlib.contextmanager
def _dashboard(root: Path, port: int, log: Path) -> Iterator[str]:
    # `mars dashboard` through the typer app, with this module's command registered.
    code = (
        "import harness.cli.main as m; m._register_commands(); import harness.cli.dashboard; "
        "m.app()"
    )
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", code, "dashboard", "--runs", str(root), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop_group(process)


class _DevTools:
    """Just enough of the Chrome DevTools protocol: evaluate JavaScript, capture a screenshot."""

    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=None, open_timeout=10)
        self._next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self._next_id += 1
        self._ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=30))
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    def text(self) -> str:
        result = self.call("Runtime.evaluate", expression="document.body.innerText")
        return str(result["result"].get("value") or "")

    def close(self) -> None:
        self._ws.close()


@contextlib.contextmanager
def _chromium(url: str, profile: Path) -> Iterator[_DevTools]:
    assert CHROMIUM is not None
    process = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--window-size=1400,1000",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        active = profile / "DevToolsActivePort"
        end = time.monotonic() + 30
        while not (active.exists() and active.read_text().strip()):
            assert time.monotonic() < end, "chromium did not open its DevTools port"
            time.sleep(0.2)
        port = int(active.read_text().split()[0])
        _wait_http(f"http://127.0.0.1:{port}/json/version", 20)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
            pages = [t for t in json.load(response) if t.get("type") == "page"]
        tools = _DevTools(pages[0]["webSocketDebuggerUrl"])
        try:
            yield tools
        finally:
            tools.close()
    finally:
        _stop_group(process)


def _wait_for_text(tools: _DevTools, needles: list[str], deadline_s: float) -> str:
    end = time.monotonic() + deadline_s
    text = ""
    while time.monotonic() < end:
        text = tools.text()
        if all(n in text for n in needles):
            return text
        time.sleep(0.5)
    raise AssertionError(f"page never showed {needles}; it showed: {text[:500]!r}")


def _ink(png: bytes) -> tuple[float, float, tuple[int, int]]:
    """(grey-level standard deviation, share of dark pixels, size) of a screenshot."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png)).convert("L")
    dark = sum(image.histogram()[:100]) / (image.size[0] * image.size[1])
    return ImageStat.Stat(image).stddev[0], dark, image.size


def test_served_dashboard_renders_runs_page_in_chromium(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    records = [synthetic.eval_record(i, correct=i % 4 != 0) for i in range(20)]
    synthetic.write_eval_run(root / "eval-browser-check", records)
    port = _free_port()
    with (
        _dashboard(root, port, tmp_path / "dashboard.log") as url,
        _chromium(url, tmp_path / "profile") as tools,
    ):
        text = _wait_for_text(tools, ["Accuracy by suite", "eval-browser-check"], 90)
        # Tables and charts paint after the text: take screenshots until the page has ink.
        end = time.monotonic() + 30
        while True:
            time.sleep(1.0)
            png = base64.b64decode(tools.call("Page.captureScreenshot", format="png")["data"])
            spread, dark, size = _ink(png)
            if (spread > 10 and dark > 0.002) or time.monotonic() > end:
                break
    shot = tmp_path / "dashboard.png"
    shot.write_bytes(png)
    keep = os.environ.get("MARS_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)

    assert "Runs" in text and "Game results by seat" in text
    assert size[0] >= 1000 and size[1] >= 700
    assert spread > 10, "screenshot is (nearly) uniform"
    assert dark > 0.002, "no dark (text) pixels: the page did not render"
