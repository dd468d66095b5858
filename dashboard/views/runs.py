"""Runs page: every run under the root; accuracy by suite x MAS x model; exploitability of poker
policies; arena results by seat."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from core.runstore import RECORDS_FILE
from dashboard import cache, data
from dashboard.views.common import (
    WRAP_ROW_PX,
    ci_text,
    empty_state,
    malformed_note,
    pct,
    percent_bars_with_ci,
    round_or_none,
    score_pct,
    show_table,
    sized,
)
from harness.unscored import NO_SCORE

ARENA_KINDS = ("arena", "selfplay")
# The headers of the wide tables, short enough for every column to fit 1400 px.
SEAT_LABELS = {
    "normalized_return (0-100)": "norm. return",
    "mean_return": "mean return",
    "invalid_rate %": "invalid %",
}
PERCENT = "%.1f"
EXPLOIT_DIGITS = "%.4f"


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Runs")
    st.caption(f"runs root: `{root}`")
    if not runs:
        empty_state(f"no runs under {root} yet", "runs")
        return
    counts = {r.name: cache.line_count(root, r.path / RECORDS_FILE) for r in runs}
    show_table(data.runs_table(runs, counts), hide_index=True, key="runs_table")

    eval_runs = [r for r in runs if r.kind == "eval"]
    st.subheader("Accuracy by suite x MAS x model")
    if not eval_runs:
        empty_state("no eval runs yet", "eval")
    else:
        names = [r.name for r in eval_runs]
        chosen = st.multiselect("eval runs to compare", names, default=names[:4], key="runs_eval")
        rows = []
        for run in eval_runs:
            if run.name not in chosen:
                continue
            loaded, frame = cache.eval_data(root, run.path / RECORDS_FILE)
            malformed_note(loaded.malformed, f"{run.name}/{RECORDS_FILE}")
            rows += data.accuracy_rows(frame, run=run.name, mas=run.mas, model=run.model_label)
        table = data.accuracy_table(rows)
        if table.empty:
            st.info("the chosen runs have no records yet")
        else:
            _accuracy_view(table)

    exploit_runs = [r for r in runs if r.kind == "exploitability"]
    if exploit_runs:
        st.subheader("Exploitability of poker policies (0 = a Nash equilibrium)")
        summaries = {r.name: cache.summary(root, r.path) for r in exploit_runs}
        table = data.exploitability_runs_table(summaries)
        show_table(
            exploitability_shown(table),
            key="exploit_table",
            formats=dict.fromkeys(("exploitability", "nash_conv"), EXPLOIT_DIGITS),
            widths={"policy": "medium"},
            row_height=WRAP_ROW_PX,
        )

    arena_runs = [r for r in runs if r.kind in ARENA_KINDS]
    st.subheader("Game results by seat")
    if not arena_runs:
        empty_state("no arena runs yet", "arena")
        return
    by_run = {}
    for run in arena_runs:
        summaries = data.arena_summaries(cache.summary(root, run.path))
        if summaries:
            by_run[run.name] = summaries
    seats = data.seat_table(by_run)
    if seats.empty:
        st.info("no arena summary.json yet (the run may still be going); see the Games page")
        return
    shown = seats.copy()
    # A seat without a graded episode has no score (older summaries wrote 0 for it).
    unscored = pd.to_numeric(shown["n"], errors="coerce").fillna(0) == 0
    for column in ("win", "draw", "loss", "mean_return", "normalized_return"):
        shown[column] = shown[column].astype(object).where(~unscored, None)
    for column in ("win", "draw", "loss"):
        shown[column + " %"] = shown[column].map(score_pct)
    shown["invalid_rate %"] = shown["invalid_rate"].map(pct)
    shown["mean_return"] = shown["mean_return"].map(lambda v: NO_SCORE if v is None else v)
    # games.arena puts the normalised return on a 0-100 scale already.
    shown["normalized_return (0-100)"] = shown["normalized_return"].map(
        lambda v: NO_SCORE if round_or_none(v) is None else round_or_none(v)
    )
    columns = ["run", "game", "seat", "player", "opponent", "n", "win %", "draw %", "loss %"]
    columns += ["normalized_return (0-100)", "mean_return", "invalid_rate %"]
    show_table(shown[columns], key="seat_table", labels=SEAT_LABELS)


def exploitability_shown(table: pd.DataFrame) -> pd.DataFrame:
    """`mars exploitability` runs as shown: the run and the figures first (exploitability with
    its 95% interval, NashConv, invalid rate), then what was measured in one wrapped column
    (player or model, samples, temperature)."""
    return pd.DataFrame(
        {
            "run": table["run"],
            "game": table["game"],
            "exploitability": table["exploitability"],
            "95% CI": [
                _interval(lo, hi) for lo, hi in zip(table["ci_low"], table["ci_high"], strict=True)
            ],
            "nash_conv": table["nash_conv"],
            "invalid %": table["invalid_rate"].map(pct),
            "policy": [_policy(row) for row in table.to_dict("records")],
            "states": table["states"],
        }
    )


def _interval(low: object, high: object) -> str:
    bounds = round_or_none(low, 4), round_or_none(high, 4)
    return "-" if None in bounds else f"[{bounds[0]:.4f}, {bounds[1]:.4f}]"


def _policy(row: dict[str, object]) -> str:
    """Who played and how it was sampled: "llm tiny-model-v1 · 32 samples · T 1.0"."""
    who = " ".join(str(row[k]) for k in ("player", "model") if row.get(k) not in (None, ""))
    parts = [who or "-"]
    if row.get("samples") not in (None, ""):
        parts.append("exact" if row["samples"] == "exact" else f"{row['samples']} samples")
    if round_or_none(row.get("temperature"), 3) is not None:
        parts.append(f"T {row['temperature']}")
    return " · ".join(parts)


def _accuracy_view(table: pd.DataFrame) -> None:
    shown = table.assign(
        **{
            "accuracy %": table["accuracy"].map(score_pct),
            "95% CI": [
                ci_text(lo, hi) for lo, hi in zip(table["ci_low"], table["ci_high"], strict=True)
            ],
        }
    )
    columns = ["suite", "mas", "model", "run", "n", "correct", "accuracy %", "95% CI", "errors"]
    columns.append("extraction_failures")
    show_table(shown[columns], hide_index=True, key="accuracy_table")
    st.altair_chart(accuracy_chart(table))


def accuracy_chart(table: pd.DataFrame) -> alt.LayerChart:
    """Bars of accuracy per suite, one per (MAS, model, run), with their 95% intervals."""
    scored = table[table["accuracy"].notna()]  # a suite with no score has no bar
    chart = percent_bars_with_ci(
        scored.assign(label=scored["mas"] + " · " + scored["model"] + " · " + scored["run"]),
        x="suite",
        series="label",
        value="accuracy",
        y_title="accuracy %",
        tooltip=["suite", "mas", "model", "run", "n", "accuracy", "ci_low", "ci_high"],
        domain=(0, 100),
    )
    return sized(chart, 320)
