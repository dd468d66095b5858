"""Columns of metrics.jsonl and of a loop's learning curve folded into figure families: one chart
per figure (a loop's `nash_conv` of every item together, `reward_mean` and its per-game, per-seat
splits together), 95% bounds as bands on their figure's line, action shares left to the card-use
heatmap."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dashboard.data.exploitability import TRAINING_PREFIXES, share_column
from dashboard.data.values import as_float

# metrics.jsonl figures written per game, seat or role as `<figure>/<item...>`.
PER_ITEM_FIGURES = (
    "return_mean",
    "reward_mean",
    "exploitability",
    "exploitability_avg",
    "nash_conv",
)
# (suffix, side): an interval bound is `<figure>_ci95_low`, `<figure>/ci95_low`, or a win rate's
# `<prefix>/ci95_low` and `<prefix>/win_ci_low` beside `<prefix>/win`.
_BOUNDS = (
    ("_ci95_low", "low"),
    ("_ci95_high", "high"),
    ("/ci95_low", "low"),
    ("/ci95_high", "high"),
    ("/win_ci_low", "low"),
    ("/win_ci_high", "high"),
)
FAMILY_COLUMNS = ["x", "series", "value", "ci_low", "ci_high"]


@dataclass(frozen=True)
class Series:
    column: str
    label: str  # what the column is of (a game and seat, a loop item); "" for a plain figure
    low: str | None = None
    high: str | None = None


@dataclass
class FamilyPlan:
    families: dict[str, list[Series]] = field(default_factory=dict)  # figure -> its series
    bands: list[str] = field(default_factory=list)  # bound columns, drawn as their figure's band
    shares: list[str] = field(default_factory=list)  # action shares, drawn in the heatmap


def bound_of(column: str, columns: Iterable[str]) -> tuple[str, str] | None:
    """(figure column, "low" or "high") when `column` is a 95% bound of a column present."""
    present = set(columns)
    for suffix, side in _BOUNDS:
        if not column.endswith(suffix):
            continue
        stem = column[: -len(suffix)]
        bases = [f"{stem}/win"] if suffix.startswith("/win_") else [stem, f"{stem}/win"]
        for base in bases:
            if base in present:
                return base, side
    return None


def family_of(column: str, *, curve: bool) -> tuple[str, str]:
    """(figure, series label) of a column. A loop's curve names the figure last
    (`<item>/<figure>`, `<item>/<seat>/<figure>`), except the watched run's training figures
    under `train/`, which are named as in metrics.jsonl: the figure first for `PER_ITEM_FIGURES`
    (`return_mean/<game>/<seat>`), otherwise the column is its own figure (`loss`,
    `data/actor/loss`)."""
    parts = column.split("/")
    if curve and len(parts) > 1 and parts[0] in TRAINING_PREFIXES:
        figure, label = family_of("/".join(parts[1:]), curve=False)
        return figure, f"{parts[0]}/{label}" if label else parts[0]
    if curve:
        return (parts[-1], "/".join(parts[:-1])) if len(parts) > 1 else (column, "")
    if len(parts) > 1 and parts[0] in PER_ITEM_FIGURES:
        return parts[0], "/".join(parts[1:])
    return column, ""


def plan_families(columns: Sequence[str], *, curve: bool) -> FamilyPlan:
    """The numeric `columns` of one run folded into figure families (in column order)."""
    plan = FamilyPlan()
    bounds: dict[str, dict[str, str]] = {}
    figures: list[str] = []
    for column in columns:
        if share_column(column) is not None:
            plan.shares.append(column)
            continue
        bound = bound_of(column, columns)
        if bound is not None:
            bounds.setdefault(bound[0], {})[bound[1]] = column
            plan.bands.append(column)
            continue
        figures.append(column)
    for column in figures:
        figure, label = family_of(column, curve=curve)
        pair = bounds.get(column, {})
        plan.families.setdefault(figure, []).append(
            Series(column, label, pair.get("low"), pair.get("high"))
        )
    return plan


def family_frame(
    frames: Mapping[str, pd.DataFrame], plans: Mapping[str, FamilyPlan], figure: str, x: str
) -> pd.DataFrame:
    """One figure of every run as a long table: x, series ("run · label"), value and its bounds
    (None where a series has none); rows without a value are left out."""
    parts = []
    for run, frame in frames.items():
        for series in plans[run].families.get(figure, []):
            part = pd.DataFrame(
                {
                    "x": frame[x],
                    "series": f"{run} · {series.label}" if series.label else run,
                    "value": _numbers(frame, series.column),
                    "ci_low": _numbers(frame, series.low),
                    "ci_high": _numbers(frame, series.high),
                }
            )
            parts.append(part.dropna(subset=["value"]))
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=FAMILY_COLUMNS)
    return pd.concat(parts, ignore_index=True)[FAMILY_COLUMNS]


def _numbers(frame: pd.DataFrame, column: str | None) -> pd.Series:
    if column is None or column not in frame.columns:
        return pd.Series(float("nan"), index=frame.index)
    values = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return values.where(values.map(math.isfinite, na_action="ignore").fillna(False).astype(bool))


def last_values(frame: pd.DataFrame, columns: Iterable[str]) -> dict[str, float | None]:
    """Each column's last recorded value (an evaluation column is empty between evaluations)."""
    out: dict[str, float | None] = {}
    for column in columns:
        values = frame[column].dropna() if column in frame.columns else pd.Series(dtype=float)
        out[column] = as_float(values.iloc[-1]) if len(values) else None
    return out
