"""`make test`'s test phase at an earlier commit and at this one, side by side (issue 54: CI "no
slower than today").

Each commit is cloned from this repository into a scratch folder where the tests find the
benchmark data (`--data-dir`, else `$MARS_DATA_DIR`, linked in at the place a clone's tests read
it, as CI lays it out), its own bytecode compiled as `make test` compiles it, and
the whole suite run with `make test`'s pytest options, an empty `MARS_CACHE_DIR` and
`MARS_TESTS_NO_SKIPS=1`, as CI runs it. Both use this checkout's virtual environment, so the
commits must share its dependencies (the bench refuses when their pyproject.toml differ). The
install is then the same for both, and CI's difference is the test phase's.

The figure is the head's wall time over the base's (lower is better; target 1.0), beside the
CPU time the whole machine spent (this machine's /proc/stat: user, nice, system, irq) and the
time the host took away (steal): a run slowed by the host shows it there, its CPU-seconds moved
less than its wall. One run each, in the order asked (`--head-first` to swap), on a shared,
noisy machine: the per-test durations of both are written (`--out`) so a difference can be read
test by test. Nothing else should run beside it.

Run: .venv/bin/python bench/suite_time.py --base 614ce94 --out /tmp/suite-time \
         --data-dir DATA [--head-first]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.0
# where a clone's tests read the benchmark data, relative to the clone's parent (tests/conftest.py)
TESTS_DATA = Path("shared") / "data" / "benchmarks"
PACKAGES = ("core", "dashboard", "games", "harness", "mas", "mars", "train_backend")
# `make test`'s pytest options (Makefile), every duration kept for the comparison
PYTEST_OPTIONS = ["-q", "-ra", "--durations=0", "-n", "2", "--no-loadscope-reorder"]
DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", re.MULTILINE)
SUMMARY = re.compile(r"(\d+) passed")


def git(*args: str, cwd: Path = REPO) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


def checked_commits(base: str) -> tuple[str, str]:
    """The base and head commits, refused unless their dependencies are this venv's."""
    base_sha, head_sha = git("rev-parse", base), git("rev-parse", "HEAD")
    if git("diff", base_sha, head_sha, "--", "pyproject.toml"):
        raise SystemExit(
            f"pyproject.toml differs between {base} and HEAD: one venv cannot run both"
        )
    return base_sha, head_sha


def machine_seconds() -> tuple[float, float]:
    """(busy, stolen) CPU-seconds of the whole machine so far, from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


@dataclass
class SuiteRun:
    wall_s: float
    busy_s: float
    steal_s: float
    passed: int
    output: str


def run_suite(commit: str, scratch: Path, out: Path, label: str) -> SuiteRun:
    """Clone `commit`, compile its bytecode, run the suite."""
    clone = scratch / label
    git("clone", "-q", str(REPO), str(clone))
    git("checkout", "-q", commit, cwd=clone)
    python = sys.executable
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", *PACKAGES],
        cwd=clone,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    cache = scratch / f"{label}-cache"
    cache.mkdir()
    env = dict(os.environ, MARS_CACHE_DIR=str(cache), MARS_TESTS_NO_SKIPS="1")
    env.pop("MARS_DATA_DIR", None)  # the tests set it to the folder linked in beside the clone
    started, (busy, stolen) = time.perf_counter(), machine_seconds()
    result = subprocess.run(
        [python, "-m", "pytest", *PYTEST_OPTIONS],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    busy_end, stolen_end = machine_seconds()
    output = result.stdout + result.stderr
    (out / f"{label}.log").write_text(output)
    if result.returncode != 0:
        raise SystemExit(f"{label} ({commit[:10]}): the suite failed; see {out / label}.log")
    passed = SUMMARY.findall(output)
    return SuiteRun(
        wall, busy_end - busy, stolen_end - stolen, int(passed[-1]) if passed else 0, output
    )


def by_file(output: str) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for value, _, node in DURATION.findall(output):
        name = node.split("::", 1)[0]
        seconds[name] = seconds.get(name, 0.0) + float(value)
    return seconds


def print_growth(base: dict[str, float], head: dict[str, float], top: int = 15) -> None:
    """The files whose summed test durations moved most between the two runs."""
    names = set(base) | set(head)
    moved = sorted(names, key=lambda n: abs(head.get(n, 0.0) - base.get(n, 0.0)), reverse=True)
    print("file: base s -> head s")
    for name in moved[:top]:
        print(f"  {name}: {base.get(name, 0.0):.1f} -> {head.get(name, 0.0):.1f}")


def data_folder(given: Path | None) -> Path:
    """The benchmark data the tests read: `--data-dir`, else `$MARS_DATA_DIR`."""
    folder = given or (
        Path(os.environ["MARS_DATA_DIR"]) if os.environ.get("MARS_DATA_DIR") else None
    )
    if folder is None or not folder.is_dir():
        raise SystemExit(
            f"no benchmark data folder ({folder or 'give --data-dir or set MARS_DATA_DIR'}): "
            "the tests read the test sets"
        )
    return folder.resolve()


def dry_run(dry: DryRun, base: str, data: Path | None) -> None:
    """The commits resolve and share this venv's dependencies, the data and pytest are there."""
    checked_commits(base)
    dry.count("commit", 2)
    data_folder(data)
    dry.count("data folder")
    for module in ("pytest", "xdist"):
        __import__(module)
        dry.count("module")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="614ce94", help="the earlier commit (default: 614ce94)")
    parser.add_argument("--out", type=Path, required=False, help="where the two logs go")
    parser.add_argument("--head-first", action="store_true", help="run HEAD before the base")
    parser.add_argument(
        "--data-dir", type=Path, help="the benchmark data (default: $MARS_DATA_DIR)"
    )
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args.base, args.data_dir))
        return
    if args.out is None:
        parser.error("--out is required")
    base_sha, head_sha = checked_commits(args.base)
    data = data_folder(args.data_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="suite-time-"))
    try:
        (scratch / TESTS_DATA).parent.mkdir(parents=True)
        (scratch / TESTS_DATA).symlink_to(data)
        order = [("head", head_sha), ("base", base_sha)]
        runs = {
            label: run_suite(sha, scratch, args.out, label)
            for label, sha in (order if args.head_first else order[::-1])
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base, head = runs["base"], runs["head"]
    for label, sha in (("base", base_sha), ("head", head_sha)):
        run = runs[label]
        print(
            f"{label} {sha[:10]}: {run.passed} passed in {run.wall_s:.0f} s "
            f"({run.busy_s:.0f} CPU-s, {run.steal_s:.0f} s stolen by the host)"
        )
    print_growth(by_file(base.output), by_file(head.output))
    report(
        "suite_wall_head_over_base",
        head.wall_s / base.wall_s,
        TARGET,
        cpu_head_over_base=round(head.busy_s / base.busy_s, 4),
        base=base_sha[:10],
        base_s=round(base.wall_s, 1),
        base_cpu_s=round(base.busy_s, 1),
        base_steal_s=round(base.steal_s, 1),
        base_passed=base.passed,
        head_s=round(head.wall_s, 1),
        head_cpu_s=round(head.busy_s, 1),
        head_steal_s=round(head.steal_s, 1),
        head_passed=head.passed,
        head_first=args.head_first,
    )


if __name__ == "__main__":
    main()
