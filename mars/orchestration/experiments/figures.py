"""What the report reads from an experiment's run directories: loop curves, and the paired
differences between a loop's start (step 0) and its last checkpoint."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.files import read_jsonl

CURVE = "learning_curve.jsonl"


@dataclass(frozen=True)
class Change:
    diff: float
    low: float
    high: float
    n: int
    method: str  # paired bootstrap | independent intervals

    def text(self, scale: float = 1.0, digits: int = 1) -> str:
        d, lo, hi = (scale * v for v in (self.diff, self.low, self.high))
        mark = "" if lo <= 0 <= hi else " *"
        return f"{d:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]{mark}"


def curve(loop_dir: Path) -> list[dict[str, Any]]:
    rows = read_jsonl(loop_dir / CURVE).rows if (loop_dir / CURVE).is_file() else []
    return sorted(
        (r for r in rows if not (r.get("error") and not r.get("evals"))), key=lambda r: r["step"]
    )


def start_and_last(rows: list[dict[str, Any]]) -> tuple[dict | None, dict | None]:
    """The start row (step 0, `--baseline`) and the last checkpoint's row (None if absent)."""
    start = rows[0] if rows and rows[0]["step"] == 0 else None
    last = rows[-1] if rows and rows[-1]["step"] != 0 else None
    return start, last


def _arena_values(run_dir: Path) -> dict[tuple[int, str], dict[str, float]]:
    """(seed, seat) -> the model seat's normalised return and win of each arena episode."""
    from games.episode import SEAT_NAMES
    from games.spec import get_game

    out: dict[tuple[int, str], dict[str, float]] = {}
    if not (run_dir / "records.jsonl").is_file():
        return out
    for record in read_jsonl(run_dir / "records.jsonl").rows:
        if record.get("error") or record.get("seat") not in SEAT_NAMES:
            continue
        index = SEAT_NAMES.index(record["seat"])
        spec = get_game(record["game"])
        out[(int(record["seed"]), record["seat"])] = {
            "norm": spec.normalize(float(record["returns"][index])),
            "win": float(record["outcomes"][index] == "win"),
        }
    return out


def arena_change(before_dir: Path, after_dir: Path, seat: str, figure: str) -> Change | None:
    """Trained minus start over the episodes both played (same seed, same seat): paired."""
    from core.stats import paired_bootstrap_diff

    a, b = _arena_values(before_dir), _arena_values(after_dir)
    shared = sorted(k for k in set(a) & set(b) if k[1] == seat)
    if not shared:
        return None
    diff, low, high = paired_bootstrap_diff(
        [a[k][figure] for k in shared], [b[k][figure] for k in shared]
    )
    return Change(diff, low, high, len(shared), "paired bootstrap over episodes")


def interval_change(before: float, ci_a: list[float], after: float, ci_b: list[float]) -> Change:
    """For two independent estimates with 95% intervals (exploitability: each from its own
    samples): the normal approximation, each interval's half-width taken as 1.96 SE."""
    se_a, se_b = ((hi - lo) / 3.92 for lo, hi in (ci_a, ci_b))
    half = 1.96 * math.sqrt(se_a**2 + se_b**2)
    diff = after - before
    return Change(diff, diff - half, diff + half, 0, "independent intervals")


def suite_change(
    before_dir: Path, after_dir: Path, suite: str
) -> tuple[Change | None, dict[str, Any]]:
    """Accuracy change over the questions both runs scored (harness.report_metrics' paired
    bootstrap), and each run's accuracy cell."""
    from core.errors import MarsError
    from harness.report import load_eval_run
    from harness.report_metrics import paired_differences, parse_metric

    try:
        a, b = load_eval_run(before_dir), load_eval_run(after_dir)
    except MarsError:
        return None, {}
    diffs = paired_differences(a.questions, b.questions, parse_metric("accuracy"), {suite: None})
    cells = {
        "before": a.summary.get("suites", {}).get(suite, {}),
        "after": b.summary.get("suites", {}).get(suite, {}),
    }
    entry = diffs.get(suite)
    if entry is None:
        return None, cells
    low, high = entry["ci95"]
    return Change(entry["diff"], low, high, entry["n"], "paired bootstrap over questions"), cells
