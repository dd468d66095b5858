"""Several servers for one model: 1,000 GSM8K questions at 128 in flight against two scripted
servers of 64 slots each (`--base-url URL1,URL2`), each reply after `--delay` seconds.

Runs the real `mars eval` three times, side by side in one process:
- one server alone (for scale: half the capacity, about twice the ideal);
- both replicas: the request phase (first request in to last reply out, from the servers' own
  timelines) over the ideal of two servers, ceil(1000 / (2 x 64)) x delay: no schedule can do
  better, since each slot answers one request at a time;
- both replicas, the second killed (SIGKILL) halfway through: every question answered, the
  graded records exactly those of the run without a failure, no errors.

Target: request phase within 1.05 of the ideal, and exact results with a replica lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DRY_RUN_PORT,
    DRY_RUN_URL,
    DryRun,
    add_dry_run,
    eval_command,
    gsm8k_file,
    report,
    run_dry,
    scripted_server_command,
)

QUESTIONS, CONCURRENCY, SLOTS = 1000, 128, 64


def command(base_url: str, run_dir: Path) -> list[str]:
    return eval_command(base_url, run_dir, QUESTIONS, CONCURRENCY, "--timeout", "30")


@contextlib.contextmanager
def scripted_server(delay_s: float, timeline: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A scripted server of SLOTS slots in its own process, writing its timeline."""
    process = subprocess.Popen(
        scripted_server_command(delay_s, timeline=timeline, slots=SLOTS),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1", process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(10)


def timeline_span(paths: list[Path]) -> float:
    """First request in to last reply out, over every server's timeline."""
    arrived, replied = [], []
    for path in paths:
        for line in path.read_text().splitlines():
            start, end = line.split("\t")
            arrived.append(float(start))
            replied.append(float(end))
    return max(replied) - min(arrived)


def graded(run_dir: Path) -> dict[str, tuple[object, object]]:
    """Each question's extracted answer and grade."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").open()]
    return {r["sample_id"]: (r.get("extracted"), r.get("correct")) for r in records}


def errors_of(run_dir: Path) -> int:
    summary = json.loads((run_dir / "summary.json").read_text())
    return sum(suite["errors"] for suite in summary["suites"].values())


def kill_when_half_done(process: subprocess.Popen, timeline: Path, after_s: float) -> None:
    """SIGKILL `process` `after_s` seconds after its first request arrived."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (timeline.exists() and timeline.stat().st_size):
        time.sleep(0.01)
    time.sleep(after_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)


def run_eval(urls: list[str], run_dir: Path) -> None:
    subprocess.run(command(",".join(urls), run_dir), check=True, stdout=subprocess.DEVNULL)


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    gsm8k_file(dry)
    dry.module(scripted_server_command(args.delay, slots=SLOTS))
    second = DRY_RUN_URL.replace(f":{DRY_RUN_PORT}/", f":{DRY_RUN_PORT + 1}/")
    dry.mars(command(f"{DRY_RUN_URL},{second}", Path(tempfile.gettempdir()) / "run"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0, help="seconds before each reply")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    ideal = math.ceil(QUESTIONS / (2 * SLOTS)) * args.delay
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spans: dict[str, float] = {}
        for name, count in (("one_server", 1), ("two_replicas", 2)):
            timelines = [root / f"{name}-{i}.tsv" for i in range(count)]
            with contextlib.ExitStack() as stack:
                servers = [
                    stack.enter_context(scripted_server(args.delay, timelines[i]))
                    for i in range(count)
                ]
                run_eval([url for url, _ in servers], root / name)
            spans[name] = timeline_span(timelines)
            print(f"{name}: request phase {spans[name]:.2f} s (ideal of two servers {ideal:.2f} s)")
        timelines = [root / f"failover-{i}.tsv" for i in range(2)]
        with contextlib.ExitStack() as stack:
            servers = [stack.enter_context(scripted_server(args.delay, t)) for t in timelines]
            killer = threading.Thread(
                target=kill_when_half_done,
                args=(servers[1][1], timelines[1], spans["two_replicas"] / 2),
            )
            killer.start()
            run_eval([url for url, _ in servers], root / "failover")
            killer.join()
        spans["failover"] = timeline_span(timelines)
        exact = graded(root / "failover") == graded(root / "two_replicas")
        failover_errors = errors_of(root / "failover")
        summary = json.loads((root / "failover" / "summary.json").read_text())
        by_replica = summary.get("usage_by_replica", {})
        answered = len(graded(root / "failover"))
        print(f"failover: request phase {spans['failover']:.2f} s; {answered} questions, the same "
              f"grades as without a failure: {exact}, errors {failover_errors}")  # fmt: skip
        for url, figures in by_replica.items():
            print(f"  {url}: {figures['calls']} calls, {figures['failures']} failed attempts")
    ratio = spans["two_replicas"] / ideal
    report(
        "replicas_request_phase_over_ideal",
        ratio,
        1.05,
        met_exact=exact and failover_errors == 0,
        one_server_over_ideal=round(spans["one_server"] / ideal, 3),
        failover_over_ideal=round(spans["failover"] / ideal, 3),
        ideal_s=ideal,
        delay_s=args.delay,
        questions=QUESTIONS,
        concurrency=CONCURRENCY,
        slots_per_server=SLOTS,
        failover_calls={url: f["calls"] for url, f in by_replica.items()},
    )


if __name__ == "__main__":
    main()
