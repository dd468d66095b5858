"""The learning curve: the loop's rows, one per step, as JSONL and as a flat CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from core.errors import MarsError
from core.files import write_atomic
from core.runstore import RunDir
from mars.api.results import LOOP_CURVE

CURVE_JSONL, CURVE_CSV = LOOP_CURVE, "learning_curve.csv"


ROW_SCHEMA_VERSION = 1
# The MAS trainer's per-role and per-policy figures the learning curve keeps (train/...).
MAS_CURVE_METRICS = ("return_mean/", "policy/", "train_accuracy", "eval/accuracy")


def curve_rows(run: RunDir) -> list[dict[str, Any]]:
    """One row per step (the last one recorded), sorted by step."""
    by_step: dict[int, dict[str, Any]] = {}
    for record in run.records():
        if isinstance(record.get("step"), int):
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def flatten_row(row: dict[str, Any]) -> dict[str, Any]:
    """One CSV line: step, checkpoint, error, then `EVAL/...` figures per evaluation."""
    flat: dict[str, Any] = {
        "step": row.get("step"),
        "checkpoint": row.get("checkpoint"),
        "error": row.get("error") or "",
        "wall_s": row.get("wall_s"),
    }
    for key, entry in (row.get("evals") or {}).items():
        if entry.get("kind") == "arena":
            seats = entry.get("seats")  # a failed item keeps its setting ("both") here
            # A cooperative game has one shared score: win/draw/loss would call every game short
            # of a perfect score a loss, so its columns are the score (the mean return).
            outcomes = ("score",) if _cooperative(entry.get("game")) else ("win", "draw", "loss")
            for seat, stats in (seats if isinstance(seats, dict) else {}).items():
                for field in (*outcomes, "normalized_return", "invalid_rate", "n"):
                    value = stats.get("mean_return" if field == "score" else field)
                    flat[f"{key}/{seat}/{field}"] = value
                low, high = stats.get("normalized_return_ci") or (None, None)
                flat[f"{key}/{seat}/normalized_return_ci_low"] = low
                flat[f"{key}/{seat}/normalized_return_ci_high"] = high
        elif entry.get("kind") == "rating":
            flat[f"{key}/rating"] = entry.get("rating")
            low, high = entry.get("ci95") or (None, None)
            flat[f"{key}/rating_ci95_low"] = low
            flat[f"{key}/rating_ci95_high"] = high
            for field in ("rank", "players", "games", "score"):
                flat[f"{key}/{field}"] = entry.get(field)
        elif entry.get("kind") == "exploit":
            for field, interval in (("exploitability", "ci95"), ("nash_conv", "nash_conv_ci95")):
                flat[f"{key}/{field}"] = entry.get(field)
                low, high = entry.get(interval) or (None, None)
                flat[f"{key}/{field}_ci95_low"] = low
                flat[f"{key}/{field}_ci95_high"] = high
            flat[f"{key}/invalid_rate"] = entry.get("invalid_rate")
            flat[f"{key}/samples"] = entry.get("samples")
            for state, shares in (entry.get("action_shares") or {}).items():
                for action, share in shares.items():
                    flat[f"{key}/policy/{state}/{action}"] = share
        else:
            flat[f"{key}/accuracy"] = entry.get("accuracy")
            low, high = entry.get("ci95") or (None, None)
            flat[f"{key}/ci95_low"] = low
            flat[f"{key}/ci95_high"] = high
            flat[f"{key}/n"] = entry.get("n")
        flat[f"{key}/run_dir"] = entry.get("run_dir")
        flat[f"{key}/error"] = entry.get("error") or ""
    if row.get("roles"):  # a MAS training step: each role's return, each policy's update
        for name, value in (row.get("train_metrics") or {}).items():
            if name.startswith(MAS_CURVE_METRICS) and isinstance(value, int | float):
                flat[f"train/{name}"] = value
    return flat


def _cooperative(game: Any) -> bool:
    from games.spec import get_game

    try:
        return isinstance(game, str) and get_game(game).cooperative
    except MarsError:  # a game this version does not know: its row keeps win/draw/loss
        return False


def write_curve(run: RunDir) -> list[dict[str, Any]]:
    """Rewrite learning_curve.jsonl and learning_curve.csv from the records (atomically)."""
    rows = curve_rows(run)
    lines = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    write_atomic(run.path / CURVE_JSONL, lines)
    flat = [flatten_row(row) for row in rows]
    columns: list[str] = []
    for line in flat:
        columns += [c for c in line if c not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    write_atomic(run.path / CURVE_CSV, buffer.getvalue())
    return rows
