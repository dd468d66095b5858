"""`make test`'s test phase at an earlier commit and at this one, side by side (issue 54: CI "no
slower than today").

Each commit is cloned from this repository into a scratch folder beside a link to ../shared (the
tests read the benchmark data there), its own bytecode compiled as `make test` compiles it, and
the whole suite run with `make test`'s pytest options, an empty `MARS_CACHE_DIR` and
`MARS_TESTS_NO_SKIPS=1`, as CI runs it. Both use this checkout's virtual environment, so the
commits must share its dependencies (the bench refuses when their pyproject.toml differ). The
install is then the same for both, and CI's difference is the test phase's.

The figure is the head's wall time over the base's (lower is better; target 1.0). One run each on
a shared, noisy machine: the per-test durations of both are written (`--out`) so a difference
can be read test by test. Nothing else should run beside it.

Run: .venv/bin/python bench/suite_time.py --base 614ce94 --out /tmp/suite-time
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.0
SHARED = REPO.parent / "shared"
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


def suite_seconds(commit: str, scratch: Path, out: Path, label: str) -> tuple[float, int, str]:
    """Clone `commit`, compile its bytecode, run the suite; (wall seconds, passed, output)."""
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
    env.pop("MARS_DATA_DIR", None)  # the tests set it to ../shared beside the clone
    started = time.perf_counter()
    result = subprocess.run(
        [python, "-m", "pytest", *PYTEST_OPTIONS],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    output = result.stdout + result.stderr
    (out / f"{label}.log").write_text(output)
    if result.returncode != 0:
        raise SystemExit(f"{label} ({commit[:10]}): the suite failed; see {out / label}.log")
    passed = SUMMARY.findall(output)
    return wall, int(passed[-1]) if passed else 0, output


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


def dry_run(dry: DryRun, base: str) -> None:
    """The commits resolve and share this venv's dependencies, the data and pytest are there."""
    checked_commits(base)
    dry.count("commit", 2)
    if not (SHARED / "data" / "benchmarks").is_dir():
        raise SystemExit(f"no benchmark data at {SHARED / 'data' / 'benchmarks'}")
    dry.count("data folder")
    for module in ("pytest", "xdist"):
        __import__(module)
        dry.count("module")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="614ce94", help="the earlier commit (default: 614ce94)")
    parser.add_argument("--out", type=Path, required=False, help="where the two logs go")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args.base))
        return
    if args.out is None:
        parser.error("--out is required")
    base_sha, head_sha = checked_commits(args.base)
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="suite-time-"))
    try:
        (scratch / "shared").symlink_to(SHARED.resolve())
        base_wall, base_passed, base_out = suite_seconds(base_sha, scratch, args.out, "base")
        head_wall, head_passed, head_out = suite_seconds(head_sha, scratch, args.out, "head")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"base {base_sha[:10]}: {base_passed} passed in {base_wall:.0f} s")
    print(f"head {head_sha[:10]}: {head_passed} passed in {head_wall:.0f} s")
    print_growth(by_file(base_out), by_file(head_out))
    report(
        "suite_wall_head_over_base",
        head_wall / base_wall,
        TARGET,
        base=base_sha[:10],
        base_s=round(base_wall, 1),
        base_passed=base_passed,
        head_s=round(head_wall, 1),
        head_passed=head_passed,
    )


if __name__ == "__main__":
    main()
