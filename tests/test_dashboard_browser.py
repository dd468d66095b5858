"""A real browser against `mars dashboard`: headless Chromium renders each page of the served app.

The app is started with the real command (`python -m mars dashboard --runs ROOT --port N`, on
127.0.0.1) over the run directories of dashboard_runs.py (made by `mars eval`, `mars failures`,
`mars arena`, `mars train`). Each page is opened by URL (`?page=<slug>`) with one Chromium call that
both dumps the DOM and takes a screenshot, with the flags of facts.md
(`--no-sandbox --disable-gpu --disable-background-networking --virtual-time-budget=15000`). The
test checks that the DOM holds the page's own text and that the screenshot is not blank, and keeps
both under test-artifacts/dashboard/ at the repository root.

Virtual time runs fast while the page only waits on its websocket, so a page whose first script
run is slow (the server's first imports, a page's first read of its files) comes back as
Streamlit's loading skeleton; that run still finishes and fills the server's caches, so a page
that lacks its text or its ink is asked for again after a pause that grows with each attempt (up
to twelve times; two or three is usual; eight quick retries once fell short on a machine running two
trainings beside the suite).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import DATA_DIR, REPO, mars_env
from dashboard_runs import RealRuns, shared_runs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (`make test` installs it as root)"
    ),
    pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found"),
]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--virtual-time-budget=15000",
    "--hide-scrollbars",
    "--window-size=1400,1600",
]
# Per page (its ?page= slug): text the page itself renders (tables draw their cells on a canvas,
# so the needles are headings, notes, metrics and widget labels).
EXPECTED = {
    "runs": [
        "Accuracy by suite x MAS x model",
        "Game results by seat",
        "1 malformed line skipped in eval-base/records.jsonl",
        "eval-trained",
    ],
    "samples": ["matching samples", "accuracy of matches", "chain of thought", "agent_1"],
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
        "Win rate against each opponent",
        "Learning curve (train",  # (markdown draws "->" as an arrow)
        "mars loop --watch",
    ],
}
ATTEMPTS = 12


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_http(url: str, deadline_s: float, process: subprocess.Popen) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert process.poll() is None, "mars dashboard exited early"
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
    command = [sys.executable, "-m", "mars", "dashboard", "--runs", str(root)]
    with log.open("w") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
            env=mars_env(),
        )
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", 90, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop_group(process)


class _Text(HTMLParser):
    """The text content of an HTML document (scripts and styles left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def dom_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def _ink(png: Path) -> tuple[float, float, tuple[int, int]]:
    """(grey-level standard deviation, share of dark pixels, size) of a screenshot."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png.read_bytes())).convert("L")
    dark = sum(image.histogram()[:100]) / (image.size[0] * image.size[1])
    return ImageStat.Stat(image).stddev[0], dark, image.size


def _rendered(text: str, png: Path, needles: list[str]) -> bool:
    if not png.is_file() or not all(n in text for n in needles):
        return False
    spread, dark, _ = _ink(png)
    return spread > 10 and dark > 0.002


def _capture(url: str, png: Path, profile: Path) -> str:
    """One Chromium call: the DOM after the virtual-time budget on stdout, the screenshot saved."""
    assert CHROMIUM is not None
    png.unlink(missing_ok=True)
    result = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
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
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RealRuns:
    return shared_runs(tmp_path_factory)


def test_each_page_renders_in_headless_chromium(
    runs: RealRuns, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    port = _free_port()
    seen: dict[str, str] = {}
    with _dashboard(runs.root, port, ARTIFACTS / "dashboard.log") as url:
        for slug, needles in EXPECTED.items():
            png = ARTIFACTS / f"{slug}.png"
            attempt = 0
            while attempt < ATTEMPTS:
                attempt += 1
                started = time.perf_counter()
                html = _capture(f"{url}/?page={slug}", png, tmp_path / f"profile-{slug}")
                seen[slug] = dom_text(html)
                (ARTIFACTS / f"{slug}.html").write_text(html, encoding="utf-8")
                elapsed = time.perf_counter() - started
                if _rendered(seen[slug], png, needles):
                    break
                # A loaded machine: let the server's first run of the page finish before asking
                # again, or the next virtual-time budget may see the same skeleton.
                time.sleep(min(2.0 * attempt, 8.0))
            with capsys.disabled():
                print(f"\n  dashboard {slug}: {png} (attempt {attempt}, {elapsed:.1f} s)", end="")

    for slug, needles in EXPECTED.items():
        text, png = seen[slug], ARTIFACTS / f"{slug}.png"
        missing = [n for n in needles if n not in text]
        assert not missing, f"{slug}: {missing} not in the DOM; it showed {text[:600]!r}"
        assert f"4 runs under {runs.root}" in text  # the sidebar: every run was found
        spread, dark, size = _ink(png)
        assert size == (1400, 1600)
        assert spread > 10, f"{slug}: the screenshot is (nearly) uniform"
        assert dark > 0.002, f"{slug}: no dark (text) pixels: the page did not render"
    # Pages differ: each shows its own header, not the Runs page again.
    assert "Outcomes per opponent and seat" not in seen["runs"]
    assert "Accuracy by suite x MAS x model" not in seen["games"]


def test_dom_text_leaves_scripts_out() -> None:
    html = "<html><script>var page = 'Runs';</script><body><h1>Games</h1><p>a <b>b</b></p></body>"
    assert dom_text(html) == "Games a b"
