"""Experiment folders made by hand for the report tests: a loop's learning curve, the arena runs
its rows point to, and a training run's metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def arena_run(path: Path, game: str, wins: list[bool]) -> None:
    """An arena run's records: the model's seat wins (+1) or loses (-1) episode by episode."""
    path.mkdir(parents=True)
    lines = []
    for seed, won in enumerate(wins):
        for index, seat in enumerate(("first", "second")):
            returns = [0.0, 0.0]
            returns[index], returns[1 - index] = (1.0, -1.0) if won else (-1.0, 1.0)
            outcomes = ["", ""]
            outcomes[index], outcomes[1 - index] = ("win", "loss") if won else ("loss", "win")
            record = {"game": game, "seed": seed, "seat": seat, "returns": returns,
                      "outcomes": outcomes}  # fmt: skip
            lines.append(json.dumps(record))
    (path / "records.jsonl").write_text("\n".join(lines) + "\n")


def arena_entry(
    run_dir: str, game: str, win: float, *, invalid: float = 0.0, opponent: str = "cfr:1000"
) -> dict[str, Any]:
    """A loop row's figures of an arena item (both seats alike)."""
    interval = [100 * win - 10, 100 * win + 10]
    seat = {"n": 20, "win": win, "normalized_return": 100 * win,
            "normalized_return_ci": interval, "invalid_rate": invalid}  # fmt: skip
    return {"kind": "arena", "game": game, "opponent": opponent, "run_dir": run_dir,
            "seats": {"first": seat, "second": seat}}  # fmt: skip


def exploit_entry(game: str, value: float, *, invalid: float = 0.0) -> dict[str, Any]:
    """A loop row's figures of an exploitability item."""
    return {"kind": "exploit", "game": game, "run_dir": f"x-{game}", "exploitability": value,
            "ci95": [value - 0.02, value + 0.02], "invalid_rate": invalid,
            "samples": 16}  # fmt: skip


def write_curve(loop: Path, rows: list[dict[str, Any]]) -> None:
    loop.mkdir(parents=True, exist_ok=True)
    (loop / "learning_curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_metrics(run: Path, rows: list[dict[str, Any]]) -> None:
    """A training run's metrics.jsonl, one line per step."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
