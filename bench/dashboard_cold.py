"""The dashboard's first page, cold, in a real browser: how long a user waits from starting
`mars dashboard` to a drawn table; and (`--only training`) the Training page of a long Kuhn run,
warm.

A headless Chromium is started first (a user's browser is already open; its start is not
timed). Then `mars dashboard` is started over a runs root (by default a demo-like set written
here: three eval runs of 300 records, an arena run, a training run and a loop), the page is
opened as soon as the server answers its health check, and the page is read every 50 ms until
the Runs page's first table is drawn with a run's name in it (Streamlit draws a table on a
canvas; its cells are in the DOM for screen readers). The figure is the time from the command's
start to that moment. Median of 5 fresh servers (after one untimed start that writes the
bytecode, as a user's disk has it), twice: on a quiet machine, and with one CPU-bound process
beside it (both arms in one run). Targets: 3 s quiet, 4 s busy. The last line is one JSON object:
`{"metric": "cold_first_page_s", "value": <median quiet>, "target": 3.0, "met": ...,
"busy_value": <median busy>, "busy_target": 4.0, "busy_met": ..., ...}` with each start's figures,
the server's own health-check time and the load average when the bench began.

`--only training`: the Training page (`?page=training`) over one synthetic Kuhn self-play run of
200 steps (`dashboard.synthetic.write_kuhn_train_run`: the training figures, the 24 action shares
of the 12 information states at every step, exploitability every 10 steps): opened once to warm
the server's caches, then opened again (each time a new session) and timed from the navigation
until the script run has finished (Streamlit's status widget gone), the page's last sections are
on screen, the best-response table lists all 12 states and the six charts are drawn (the policy
heatmap of 200 checkpoints on a canvas). Target: within 5 s warm.

Every page warm (`--only pages`): over 20 runs (the demo-like ones and more evals and training
runs of the same kinds), each page opened once to warm the server's caches and then `--repeats`
times, each a new session, timed from the navigation until the script run is over and the
page's heading is drawn. Target: every page within 2 s warm (the worst page's median).

    python bench/dashboard_cold.py [--runs DIR] [--repeats 5] [--only first|training|pages]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
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
from dashboard.defaults import STATE_ENV

TARGET_S = 3.0
BUSY_TARGET_S = 4.0
FIRST_TABLE_RUN = "eval-single"  # a run the Runs page's first table lists
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
PAGES_TARGET_S = 2.0
PAGES_RUNS = 20
# page slug -> its heading: what a drawn page shows (dashboard/app.py's pages)
PAGE_HEADINGS = {
    "runs": "Runs",
    "samples": "Samples",
    "compare": "Compare",
    "failure-modes": "Failure modes",
    "games": "Games",
    "training": "Training",
    "inspector": "Training inspector",
    "experiments": "Experiments",
}
KUHN_LABELS = [
    f"P{seat} {history} {card}"
    for seat, history in ((0, "-"), (0, "pb"), (1, "p"), (1, "b"))
    for card in "JQK"
]


def write_demo_like_runs(root: Path) -> None:
    """Runs like the demo's (`FIRST_TABLE_RUN` among them)."""
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


def write_twenty_runs(root: Path) -> None:
    """The demo-like runs and more of the same kinds, `PAGES_RUNS` in all."""
    from dashboard import synthetic

    write_demo_like_runs(root)
    extra = PAGES_RUNS - len(list(root.iterdir()))
    for index in range(extra):
        if index % 2:
            synthetic.write_train_run(root / f"train-{index}", 20 + index)
            continue
        records = [
            synthetic.eval_record(i, suite=("gsm8k", "aqua")[i % 2], correct=(i + index) % 4 != 0)
            for i in range(300)
        ]
        synthetic.write_eval_run(root / f"eval-more-{index}", records, mas="single")


def page_drawn(heading: str) -> str:
    """JavaScript: the script run is over (no status widget) and the page's heading is drawn."""
    headings = "Array.from(document.querySelectorAll('h1, h2')).map(h => h.textContent)"
    return (
        "!document.querySelector('[data-testid=\"stStatusWidget\"]') && "
        f"{headings}.some(t => t.includes({json.dumps(heading)}))"
    )


def every_page_warm(work: Path, repeats: int) -> dict[str, list[float]]:
    """Each page over `PAGES_RUNS` runs: once untimed (caches filled), then `repeats` times."""
    root = work / "twenty-runs"
    write_twenty_runs(root)
    port = free_port()
    server = start_dashboard(root, port, work / "dashboard-state.json")
    browser = None
    timings: dict[str, list[float]] = {}
    try:
        wait_until_healthy(port, 60)
        browser = Browser(Path(tempfile.mkdtemp(dir=work)))
        for slug, heading in PAGE_HEADINGS.items():
            url = f"http://127.0.0.1:{port}/?page={slug}"
            if time_until(browser, url, page_drawn(heading), 120) is None:
                raise SystemExit(f"the {heading} page was not drawn within 120 s")
            warm = [time_until(browser, url, page_drawn(heading), 60) for _ in range(repeats)]
            if any(w is None for w in warm):
                raise SystemExit(f"the {heading} page was not drawn within 60 s warm")
            timings[slug] = [w for w in warm if w is not None]
    finally:
        if browser is not None:
            browser.close()
        os.killpg(server.pid, 15)
        server.wait(20)
    return timings


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


def start_dashboard(root: Path, port: int, state: Path) -> subprocess.Popen:
    """`mars dashboard` over `root`, in its own session, as a user starts it (bytecode kept);
    its state file (the runs opened last) is the bench's own."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", STATE_ENV: str(state)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.Popen(
        dashboard_command(root, port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


def first_table_drawn(run: str) -> str:
    """JavaScript: a table on the page lists `run` (a table draws on a canvas; its cells are in
    the DOM for screen readers, not in innerText)."""
    return (
        "Array.from(document.querySelectorAll('[data-testid=\"stDataFrame\"]'))"
        f".some(t => t.textContent.includes({json.dumps(run)}))"
    )


def one_cold_start(root: Path, run: str, work: Path) -> tuple[float, float]:
    """(command start to a healthy server, command start to the first table drawn), seconds."""
    port = free_port()
    browser = Browser(Path(tempfile.mkdtemp(dir=work)))  # open before the clock starts
    server = None
    try:
        started = time.perf_counter()
        server = start_dashboard(root, port, work / "dashboard-state.json")
        wait_until_healthy(port, 60)
        healthy = time.perf_counter() - started
        browser.navigate(f"http://127.0.0.1:{port}/")
        if not browser.wait_for(first_table_drawn(run), 60, poll_s=POLL_S):
            raise SystemExit(f"no table listing {run} within 60 s")
        drawn = time.perf_counter() - started
    finally:
        browser.close()
        if server is not None:
            os.killpg(server.pid, 15)
            server.wait(20)
    return healthy, drawn


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """One CPU-bound process beside the dashboard (a training run, a test suite)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait(10)


def cold_starts(root: Path, run: str, work: Path, repeats: int) -> list[tuple[float, float]]:
    return [one_cold_start(root, run, work) for _ in range(repeats)]


def training_page_warm(work: Path, repeats: int) -> list[float]:
    """The Training page over a 200-step Kuhn run: opened once untimed (the caches filled), then
    `repeats` times timed, each a new session of the same server."""
    from dashboard import synthetic

    root = work / "training-runs"
    synthetic.write_kuhn_train_run(root / "train-kuhn", TRAINING_STEPS)
    port = free_port()
    server = start_dashboard(root, port, work / "dashboard-state.json")
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
    load = os.getloadavg()
    root = args.runs
    run = args.table_run
    if root is None:
        root = work / "runs"
        write_demo_like_runs(root)
        run = FIRST_TABLE_RUN
    one_cold_start(root, run, work)  # untimed: bytecode written, as on a user's disk
    quiet = cold_starts(root, run, work, args.repeats)
    with busy_process():
        busy = cold_starts(root, run, work, args.repeats)
    for name, timings in (("quiet", quiet), ("one busy process beside", busy)):
        print(
            f"{name}: server healthy {', '.join(f'{h:.2f}' for h, _ in timings)} s; "
            f"first table {', '.join(f'{d:.2f}' for _, d in timings)} s"
        )
    value = statistics.median(d for _, d in quiet)
    busy_value = statistics.median(d for _, d in busy)
    report(
        "cold_first_page_s",
        value,
        TARGET_S,
        busy_value=round(busy_value, 4),
        busy_target=BUSY_TARGET_S,
        busy_met=busy_value <= BUSY_TARGET_S,
        health_s=round(statistics.median(h for h, _ in quiet), 3),
        busy_health_s=round(statistics.median(h for h, _ in busy), 3),
        quiet_s=[round(d, 3) for _, d in quiet],
        busy_s=[round(d, 3) for _, d in busy],
        repeats=args.repeats,
        load_average=[round(x, 2) for x in load],
        cpus=os.cpu_count(),
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


def pages_warm(args: argparse.Namespace, work: Path) -> None:
    timings = every_page_warm(work, args.repeats)
    medians = {slug: round(statistics.median(t), 3) for slug, t in timings.items()}
    for slug, times in timings.items():
        print(f"{slug}: {', '.join(f'{t:.2f}' for t in times)} s")
    worst = max(medians, key=lambda slug: medians[slug])
    report(
        "every_page_warm_s",
        medians[worst],
        PAGES_TARGET_S,
        slowest_page=worst,
        page_medians=medians,
        runs=PAGES_RUNS,
        repeats=args.repeats,
        load_average=[round(x, 2) for x in os.getloadavg()],
    )


# what the bench writes its runs with (dashboard.synthetic), and the pages it opens
WRITERS = ("eval_record", "write_eval_run", "arena_record", "write_arena_run", "write_train_run",
           "write_loop_run", "write_kuhn_train_run")  # fmt: skip
PAGES = {
    "first": ("runs",),
    "training": ("training",),
    "pages": tuple("failures" if slug == "failure-modes" else slug for slug in PAGE_HEADINGS),
}


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The `mars dashboard` command line of the measurement, the page it opens (the first, or
    `?page=training`), the synthetic run writers; chromium's absence is noted."""
    from core.errors import MarsError
    from dashboard import synthetic

    if args.runs is not None and not args.runs.is_dir():
        raise MarsError(f"--runs {args.runs}: no folder there")
    if args.repeats < 1:
        raise MarsError("--repeats must be at least 1")
    work = Path(tempfile.gettempdir()) / "mars-dashboard-cold-dry-run"  # named, not made
    dry.mars(dashboard_command(args.runs or work / "runs", DRY_RUN_PORT))
    dashboard_pages(dry, PAGES[args.only])
    has_names(dry, synthetic, WRITERS, "run writer")
    if CHROMIUM is None:
        dry.note("chromium is not installed (apt-get install chromium): the real run stops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="runs root (default: demo-like runs)")
    parser.add_argument(
        "--table-run",
        default=FIRST_TABLE_RUN,
        help="with --runs: a run the Runs page's first table lists (its path under the root)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="fresh servers per arm")
    parser.add_argument(
        "--only",
        choices=("first", "training", "pages"),
        default="first",
        help="the cold first page (default), the Training page warm, or every page warm",
    )
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="mars-dashboard-cold-") as tmp:
        measure = {"first": first_page, "training": training_page, "pages": pages_warm}
        measure[args.only](args, Path(tmp))


if __name__ == "__main__":
    main()
