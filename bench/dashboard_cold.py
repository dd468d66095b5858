"""The dashboard's first page, cold, in a real browser: how long a user looks at a blank page; and
the Training page of a long Kuhn run, warm.

`mars dashboard` is started fresh over a runs root (by default a demo-like set written here: three
eval runs of 300 records, an arena run, a training run and a loop), and headless Chromium is
driven over the DevTools protocol (dashboard/browser.py): as soon as the server answers its
health check, the page is opened, and the page's text is read every 50 ms until the first page's
heading and its accuracy table's first suite are on screen. The figure is the time from the
navigation (the first request) to that moment; also printed: command start to server ready.
Several fresh servers, each figure's median and worst. Target: the first page within 3 s of the
first request.

Then the Training page (`?page=training`) over one synthetic Kuhn self-play run of 200 steps
(`dashboard.synthetic.write_kuhn_train_run`: the training figures, the 24 action shares of the 12
information states at every step, exploitability every 10 steps): opened once to warm the
server's caches, then opened again (each time a new session) and timed from the navigation until
the script run has finished (Streamlit's status widget gone), the page's last sections are on
screen, the best-response table lists all 12 states and the six charts are drawn (the policy
heatmap of 200 checkpoints on a canvas). Target: within 5 s warm.

    python bench/dashboard_cold.py [--runs DIR] [--repeats 3] [--only first|training]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (
    DRY_RUN_PORT,
    DryRun,
    add_dry_run,
    dashboard_pages,
    has_names,
    report,
    run_dry,
)
from dashboard.browser import CHROMIUM, Browser, free_port

TARGET_S = 3.0
HEADING = "Accuracy by suite x MAS x model"
TRAINING_TARGET_S = 5.0
TRAINING_STEPS = 200
# The Training page's last sections, drawn when its script run reaches them.
TRAINING_NEEDLES = [
    "Policy against equilibrium",
    "Best response per state",
    "Learning curve (train",
]
# The four default figures, exploitability, the policy heatmap.
TRAINING_CHARTS = 6
KUHN_LABELS = [
    f"P{seat} {history} {card}"
    for seat, history in ((0, "-"), (0, "pb"), (1, "p"), (1, "b"))
    for card in "JQK"
]


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


POLL_S = 0.05  # how often the page's text is read while timing


def time_until(browser: Browser, url: str, condition: str, timeout_s: float) -> float | None:
    """Seconds from navigating to `url` until the JavaScript `condition` holds in the new
    document (read every 50 ms), None past `timeout_s`."""
    started = time.perf_counter()
    browser.navigate(url)
    if browser.wait_for(condition, timeout_s, poll_s=POLL_S):
        return time.perf_counter() - started
    return None


def shows_text(
    needles: list[str], text: str = "document.body ? document.body.innerText : ''"
) -> str:
    """JavaScript: the page's text (or the `text` expression) holds every needle."""
    return f"(text => {json.dumps(needles)}.every(n => text.includes(n)))({text})"


def training_drawn(needles: list[str], labels: list[str], charts: int) -> str:
    """JavaScript: the script run is over (no status widget), the needles are on screen, the
    tables' cells hold every label (a table draws on a canvas; its cells are in the DOM for
    screen readers, not in innerText), and at least `charts` charts are drawn, each on its canvas
    (Streamlit's choice for many points, as the heatmap of 200 steps) or as SVG with marks."""
    tables = (
        "Array.from(document.querySelectorAll('[data-testid=\"stDataFrame\"]'))"
        ".map(t => t.textContent).join(' | ')"
    )
    drawn = (
        f"(charts => charts.length >= {charts} && charts.every(c => c.querySelector("
        "'canvas, svg .role-mark > *')))(Array.from(document.querySelectorAll("
        "'[data-testid=\"stVegaLiteChart\"]')))"
    )
    return (
        f"!document.querySelector('[data-testid=\"stStatusWidget\"]') && {shows_text(needles)}"
        f" && {shows_text(labels, tables)} && {drawn}"
    )


def dashboard_command(root: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "mars", "dashboard", "--runs", str(root), "--port", str(port)]


def start_dashboard(root: Path, port: int) -> subprocess.Popen:
    """`mars dashboard` over `root`, in its own session, as a user starts it (bytecode kept)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.Popen(
        dashboard_command(root, port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


def one_cold_start(root: Path, needles: list[str], work: Path) -> tuple[float, float]:
    port = free_port()
    started = time.perf_counter()
    server = start_dashboard(root, port)
    browser = None
    try:
        wait_until_healthy(port, 60)
        ready = time.perf_counter() - started
        browser = Browser(Path(tempfile.mkdtemp(dir=work)))
        first_page = time_until(browser, f"http://127.0.0.1:{port}/", shows_text(needles), 60)
        if first_page is None:
            raise SystemExit(f"the first page did not show {needles} within 60 s")
    finally:
        if browser is not None:
            browser.close()
        os.killpg(server.pid, 15)
        server.wait(20)
    return ready, float(first_page)


def training_page_warm(work: Path, repeats: int) -> list[float]:
    """The Training page over a 200-step Kuhn run: opened once untimed (the caches filled), then
    `repeats` times timed, each a new session of the same server."""
    from dashboard import synthetic

    root = work / "training-runs"
    synthetic.write_kuhn_train_run(root / "train-kuhn", TRAINING_STEPS)
    port = free_port()
    server = start_dashboard(root, port)
    browser = None
    url = f"http://127.0.0.1:{port}/?page=training"
    condition = training_drawn(TRAINING_NEEDLES, KUHN_LABELS, TRAINING_CHARTS)
    try:
        wait_until_healthy(port, 60)
        browser = Browser(Path(tempfile.mkdtemp(dir=work)))
        cold = time_until(browser, url, condition, 120)
        if cold is None:
            raise SystemExit("the Training page was not drawn within 120 s")
        print(f"training page, first (cold caches): {cold:.2f} s")
        warm = [time_until(browser, url, condition, 60) for _ in range(repeats)]
    finally:
        if browser is not None:
            browser.close()
        os.killpg(server.pid, 15)
        server.wait(20)
    if any(w is None for w in warm):
        raise SystemExit("the Training page was not drawn within 60 s warm")
    return [w for w in warm if w is not None]


def first_page(args: argparse.Namespace, work: Path) -> None:
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


def training_page(args: argparse.Namespace, work: Path) -> None:
    warm = training_page_warm(work, args.repeats)
    print(f"training page, warm: {', '.join(f'{w:.2f}' for w in warm)} s")
    report(
        "training_page_warm_s",
        max(warm),
        TRAINING_TARGET_S,
        median_s=round(statistics.median(warm), 3),
        steps=TRAINING_STEPS,
        states=len(KUHN_LABELS),
        repeats=args.repeats,
    )


# what the bench writes its runs with (dashboard.synthetic), and the pages it opens
WRITERS = ("eval_record", "write_eval_run", "arena_record", "write_arena_run", "write_train_run",
           "write_loop_run", "write_kuhn_train_run")  # fmt: skip
PAGES = ("runs", "training")


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The `mars dashboard` command line of each measurement, the pages it opens (the first,
    `?page=training`), the synthetic run writers; chromium's absence is noted."""
    from core.errors import MarsError
    from dashboard import synthetic

    if args.runs is not None and not args.runs.is_dir():
        raise MarsError(f"--runs {args.runs}: no folder there")
    if args.repeats < 1:
        raise MarsError("--repeats must be at least 1")
    work = Path(tempfile.gettempdir()) / "mars-dashboard-cold-dry-run"  # named, not made
    for only in ("first", "training"):
        if args.only in (None, only):
            dry.mars(dashboard_command(args.runs or work / "runs", DRY_RUN_PORT))
    dashboard_pages(dry, PAGES)
    has_names(dry, synthetic, WRITERS, "run writer")
    if CHROMIUM is None:
        dry.note("chromium is not installed (apt-get install chromium): the real run stops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="runs root (default: demo-like runs)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only", choices=("first", "training"), help="one of the two measurements (default both)"
    )
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="mars-dashboard-cold-") as tmp:
        if args.only in (None, "first"):
            first_page(args, Path(tmp))
        if args.only in (None, "training"):
            training_page(args, Path(tmp))


if __name__ == "__main__":
    main()
