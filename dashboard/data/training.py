"""Training and loop logs as tables: metrics, win rates against the bots, learning curves."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from core.files import JsonlData
from core.runstore import SUMMARY_FILE
from dashboard.data.families import FamilyPlan, last_values
from dashboard.data.files import read_csv_rows, read_json, read_jsonl
from dashboard.data.values import as_float, ci_bounds


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def metrics_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """metrics.jsonl rows flattened ("eval": {"mcts": ...} -> "eval/mcts/..."), by step."""
    flat = [_flatten(r) for r in rows]
    frame = pd.DataFrame(flat)
    if frame.empty:
        return frame
    if "step" not in frame.columns:
        frame.insert(0, "step", range(len(frame)))
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce")
    return frame.dropna(subset=["step"]).sort_values("step", kind="stable").reset_index(drop=True)


def numeric_columns(frame: pd.DataFrame, exclude: Iterable[str] = ("step",)) -> list[str]:
    skip = set(exclude)
    out = []
    for column in frame.columns:
        if column in skip:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.notna().any() and frame[column].map(_is_scalar_number).all():
            out.append(column)
    return out


def _is_scalar_number(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return value is None
    return isinstance(value, (int, float))


def _win_interval(row: pd.Series, prefix: str) -> tuple[float | None, float | None]:
    """A win rate's 95% interval: `<prefix>/ci95` as [low, high], `<prefix>/ci95_low` and
    `/ci95_high` (as `mars train` writes them), or `/win_ci_low` and `/win_ci_high`."""
    low, high = ci_bounds(row.get(f"{prefix}/ci95"))
    for low_name, high_name in (("ci95_low", "ci95_high"), ("win_ci_low", "win_ci_high")):
        if low is None:
            low = as_float(row.get(f"{prefix}/{low_name}"))
            high = as_float(row.get(f"{prefix}/{high_name}"))
    return low, high


def win_rate_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every in-training win rate with its interval: `eval/<game>/<opponent>/<seat>/win` (the CPU
    trainer's metrics) or `eval/<opponent>/<seat>/win` (game "-")."""
    rows = []
    columns = ["step", "game", "opponent", "seat", "win", "ci_low", "ci_high"]
    if frame.empty:
        return pd.DataFrame(rows, columns=columns)
    for column in frame.columns:
        parts = column.split("/")
        if len(parts) not in (4, 5) or parts[0] != "eval" or parts[-1] != "win":
            continue
        game = parts[1] if len(parts) == 5 else "-"
        prefix = "/".join(parts[:-1])
        for _, row in frame.iterrows():
            win = as_float(row[column])
            if win is None:
                continue
            low, high = _win_interval(row, prefix)
            rows.append(
                {
                    "step": row["step"],
                    "game": game,
                    "opponent": parts[-3],
                    "seat": parts[-2],
                    "win": win,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def learning_curve(path: Path) -> JsonlData:
    """A loop's learning curve; nested JSON objects flattened with "/" as in the CSV."""
    if path.suffix == ".csv":
        return read_csv_rows(path)
    loaded = read_jsonl(path)
    return JsonlData(rows=[_flatten(row) for row in loaded.rows], malformed=loaded.malformed)


def summary_of(path: Path) -> dict[str, Any] | None:
    return read_json(Path(path) / SUMMARY_FILE)


def updates_in(frame: pd.DataFrame) -> int:
    """The training steps a run's metrics hold: its rows with a loss (the step-0 evaluation of
    the start policy has none), or without a loss column (verl's) its steps from 1."""
    if "loss" in frame:
        return int(frame["loss"].notna().sum())
    if "step" in frame:
        return int((frame["step"] >= 1).sum())
    return len(frame)


def last_values_tables(
    frames: Mapping[str, pd.DataFrame], plans: Mapping[str, FamilyPlan], figures: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each run's last recorded values of `figures`, as two narrow tables rather than one wide:
    per run (its steps, last step and each figure's run-wide value), and per split of a figure
    (a game and seat, a role: `reward_mean/<game>/<seat>`), one row per (run, split)."""
    runs, splits = [], []
    for run, frame in frames.items():
        row: dict[str, Any] = {
            "run": run,
            "steps": updates_in(frame),
            "last step": frame.iloc[-1]["step"],
        }
        by_split: dict[str, dict[str, Any]] = {}
        for figure in figures:
            for series in plans[run].families.get(figure, []):
                value = last_values(frame, [series.column])[series.column]
                if series.label:
                    by_split.setdefault(series.label, {"run": run, "split": series.label})
                    by_split[series.label][figure] = value
                else:
                    row[figure] = value
        runs.append(row)
        splits += by_split.values()
    shown = [f for f in figures if any(f in row for row in runs)]
    split_figures = [f for f in figures if any(f in row for row in splits)]
    return (
        pd.DataFrame(runs, columns=["run", "steps", "last step", *shown]),
        pd.DataFrame(splits, columns=["run", "split", *split_figures]),
    )


def curve_table(frame: pd.DataFrame, x: str, most: int) -> tuple[pd.DataFrame, int]:
    """A loop's learning curve turned on its side, so that it fits a page: one row per figure
    (the key column `figure` first), one column per checkpoint (`<x> <value>`), at most `most`
    of them (the first and the last ones); and how many checkpoints there are. Cells are text
    (a column mixes paths and numbers): numbers to 4 significant digits, a checkpoint's path
    by its last part."""
    rows = frame.reset_index(drop=True)
    kept = rows if len(rows) <= most else pd.concat([rows.head(1), rows.tail(most - 1)])
    table: dict[str, list[str]] = {"figure": [c for c in rows.columns if c != x]}
    for _, row in kept.iterrows():
        table[f"{x} {_cell(row[x])}"] = [
            _cell(row[c], path=c == "checkpoint") for c in table["figure"]
        ]
    return pd.DataFrame(table), len(rows)


def _cell(value: Any, *, path: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        text = str(value)
        return Path(text).name or text if path else text
    return f"{value:.4g}"
