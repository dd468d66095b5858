"""The dashboard's first page, cold, in a real browser: how long a user looks at a blank page.

`mars dashboard` is started fresh over a runs root (by default a demo-like set written here: three
eval runs of 300 records, an arena run, a training run and a loop), and headless Chromium is
driven over the DevTools protocol: as soon as the server answers its health check, the page is
opened, and the page's text is read every 50 ms until the first page's heading and its accuracy
table's first suite are on screen. The figure is the time from the navigation (the first request)
to that moment; also printed: command start to server ready. Several fresh servers, each figure's
median and worst. Target: the first page within 3 s of the first request.

    python bench/dashboard_cold.py [--runs DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import report

TARGET_S = 3.0
HEADING = "Accuracy by suite x MAS x model"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_demo_like_runs(root: Path) -> str:
    """Runs like the demo's; returns a suite name the first page must show."""
    from dashboard import synthetic

    for index, mas in enumerate(("single", "mad", "autogen")):
        records = [
            synthetic.eval_record(i, suite=("gsm8k", "aqua")[i % 2], correct=(i + index) % 3 != 0)
            for i in range(300)
        ]
        synthetic.write_eval_run(root / f"eval-{mas}", records, mas=mas)
    outcomes = ("win", "draw", "loss")
    arena = [
        synthetic.arena_record(i, ("first", "second")[i % 2], outcome=outcomes[i % 3])
        for i in range(200)
    ]
    synthetic.write_arena_run(root / "arena", arena)
    synthetic.write_train_run(root / "train", 40)
    rows = [{"step": s, "checkpoint": f"step_{s:06d}", "score": 0.1 * s} for s in range(0, 41, 10)]
    synthetic.write_loop_run(root / "loop", rows)
    return "gsm8k"


def wait_until_healthy(port: int, deadline_s: float) -> None:
    url = f"http://127.0.0.1:{port}/_stcore/health"
    limit = time.monotonic() + deadline_s
    while time.monotonic() < limit:
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit(f"the dashboard did not answer {url} within {deadline_s:g} s")


class Browser:
    """Headless Chromium with one page, driven over its DevTools websocket."""

    def __init__(self, profile: Path) -> None:
        self.port = free_port()
        command = [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--no-first-run", "--window-size=1400,1600",
            f"--remote-debugging-port={self.port}", f"--user-data-dir={profile}", "about:blank",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.ws_url = self._page_socket()
        self._ids = 0

    def _page_socket(self) -> str:
        limit = time.monotonic() + 30
        while time.monotonic() < limit:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list") as reply:
                    pages = [t for t in json.load(reply) if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("Chromium's DevTools endpoint did not come up within 30 s")

    async def _call(self, ws: Any, method: str, **params: Any) -> dict[str, Any]:
        self._ids += 1
        await ws.send(json.dumps({"id": self._ids, "method": method, "params": params}))
        while True:
            message = json.loads(await ws.recv())
            if message.get("id") == self._ids:
                return message.get("result", {})

    async def time_first_page(self, url: str, needles: list[str], timeout_s: float) -> float:
        import websockets

        async with websockets.connect(self.ws_url, max_size=None) as ws:
            started = time.perf_counter()
            await self._call(ws, "Page.navigate", url=url)
            expression = "document.body ? document.body.innerText : ''"
            while time.perf_counter() - started < timeout_s:
                result = await self._call(ws, "Runtime.evaluate", expression=expression)
                text = result.get("result", {}).get("value", "")
                if all(needle in text for needle in needles):
                    return time.perf_counter() - started
                await asyncio.sleep(0.05)
        raise SystemExit(f"the first page did not show {needles} within {timeout_s:g} s")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def one_cold_start(root: Path, needles: list[str], work: Path) -> tuple[float, float]:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "mars", "dashboard", "--runs", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    browser = None
    try:
        wait_until_healthy(port, 60)
        ready = time.perf_counter() - started
        browser = Browser(Path(tempfile.mkdtemp(dir=work)))
        first_page = asyncio.run(
            browser.time_first_page(f"http://127.0.0.1:{port}/", needles, timeout_s=60)
        )
    finally:
        if browser is not None:
            browser.close()
        os.killpg(server.pid, 15)
        server.wait(20)
    return ready, first_page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="runs root (default: demo-like runs)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="mars-dashboard-cold-") as tmp:
        work = Path(tmp)
        needles = [HEADING]
        root = args.runs
        if root is None:
            root = work / "runs"
            needles.append(write_demo_like_runs(root))
        one_cold_start(root, needles, work)  # untimed: bytecode written, as on a user's disk
        timings = [one_cold_start(root, needles, work) for _ in range(args.repeats)]
    ready = [r for r, _ in timings]
    first = [f for _, f in timings]
    print(f"command start to server ready: median {statistics.median(ready):.2f} s")
    print(f"first request to first page: {', '.join(f'{f:.2f}' for f in first)} s")
    report(
        "dashboard_first_page_s",
        max(first),
        TARGET_S,
        median_s=round(statistics.median(first), 3),
        server_ready_s=round(statistics.median(ready), 3),
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
