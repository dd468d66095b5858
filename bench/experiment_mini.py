"""A miniature experiment end to end on this machine, timed: `mars experiment marshal-mini`
(MARSHAL's experiment in miniature) or, with `--experiment stronger-mas-mini`, Stronger-MAS's
(training runs, every checkpoint's evaluations, the report), from an empty folder.

Runs the real command in a fresh experiment folder (`--out`, default a temporary one) with an
empty MARS cache (`--cache-dir` to reuse one), so the time includes building the tiny model and
the experiment's starts, and reads each part's wall time from the experiment's own
`experiment.json` (what is left of the total is the starts' builds). Target: the whole
experiment in at most 60 minutes on this machine, with its report written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DryRun, add_dry_run, local_gsm8k, report, run_dry

EXPERIMENTS = ("marshal-mini", "stronger-mas-mini")
TARGET_MINUTES = 60.0


def command(experiment: str, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mars", "experiment", experiment, "--run-dir", str(root), *extra]


def dry_run(dry: DryRun) -> None:
    """The experiment's command line (the experiment's own `--dry-run`, every part checked, is
    tests/test_experiment.py's)."""
    for experiment in EXPERIMENTS:
        dry.mars(command(experiment, Path(tempfile.gettempdir()) / f"{experiment}-dry-run"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", choices=EXPERIMENTS, default=EXPERIMENTS[0])
    parser.add_argument("--out", type=Path, help="the experiment folder (default: a new one)")
    parser.add_argument(
        "--cache-dir", type=Path, help="MARS_CACHE_DIR to use (default: a new, empty one)"
    )
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    experiment = args.experiment
    root = args.out or Path(tempfile.mkdtemp(prefix=f"{experiment}-")) / experiment
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix=f"{experiment}-cache-"))
    empty_cache = not cache.exists() or not any(cache.iterdir())
    env = {**os.environ, "MARS_CACHE_DIR": str(cache)}
    if experiment == "marshal-mini":  # its GSM8K parts: an empty cache holds no test sets
        env["MARS_DATA_DIR"] = str(local_gsm8k().parent.parent)
    started = time.perf_counter()
    done = subprocess.run(command(experiment, root), check=False, env=env)
    minutes = (time.perf_counter() - started) / 60
    state = json.loads((root / "experiment.json").read_text())
    parts = {
        name: round(float(part.get("wall_s", 0.0)) / 60, 2)
        for name, part in (state.get("parts") or {}).items()
        if isinstance(part, dict)
    }
    failed = sorted(
        name
        for name, part in (state.get("parts") or {}).items()
        if isinstance(part, dict) and part.get("status") in ("failed", "blocked")
    )
    print(f"{experiment}: {minutes:.1f} min, exit {done.returncode}; report: {root / 'report.md'}")
    for name, part_minutes in parts.items():
        print(f"  {name}: {part_minutes:.1f} min")
    report(
        f"{experiment.replace('-', '_')}_minutes",
        minutes,
        TARGET_MINUTES,
        exit_code=done.returncode,
        failed_parts=failed,
        report_written=(root / "report.md").is_file(),
        part_minutes=parts,
        start_build_minutes=round(minutes - sum(parts.values()), 2),
        empty_cache=empty_cache,  # a new folder, or a --cache-dir that held nothing
        folder=str(root),
    )


if __name__ == "__main__":
    main()
