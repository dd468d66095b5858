"""Training page: metrics.jsonl curves of train runs overlaid, win rates, exploitability, MAS
training runs role by role (views/mas_training.py), loop learning curves."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import cache, data
from dashboard.views import mas_training
from dashboard.views.common import empty_state, malformed_note

DEFAULT_METRICS = ("reward_mean", "loss", "kl", "invalid_rate", "train_accuracy")
CURVE_X = ("step", "iteration", "round", "checkpoint_step", "checkpoint")
STEP_AXIS = alt.X("step:Q", axis=alt.Axis(format="d", tickMinStep=1))  # whole steps


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Training")
    train_runs = [r for r in runs if r.has_metrics]
    loop_runs = [r for r in runs if r.curve_file is not None]
    if not train_runs and not loop_runs:
        empty_state("no training runs yet", "train")
        return
    if train_runs:
        _metrics_view(root, train_runs)
    else:
        empty_state("no train run with metrics.jsonl yet", "train")
    mas_training.render(root, train_runs)
    st.subheader("Learning curve (train -> eval loop)")
    if loop_runs:
        _curves_view(root, loop_runs)
    else:
        empty_state("no loop run yet", "loop")


def _metrics_view(root: Path, train_runs: list[data.RunEntry]) -> None:
    names = [r.name for r in train_runs]
    chosen = st.multiselect("train runs", names, default=names[:4], key="train_runs")
    frames: dict[str, pd.DataFrame] = {}
    for run in train_runs:
        if run.name not in chosen:
            continue
        loaded = cache.jsonl(root, run.path / data.METRICS_FILE)
        malformed_note(loaded.malformed, f"{run.name}/{data.METRICS_FILE}")
        frames[run.name] = cache.metrics(root, run.path / data.METRICS_FILE)
    frames = {name: frame for name, frame in frames.items() if not frame.empty}
    if not frames:
        st.info("the chosen runs have no metrics yet")
        return
    available: list[str] = []
    for frame in frames.values():
        available += [c for c in data.numeric_columns(frame) if c not in available]
    curves = [c for c in available if not c.startswith("eval/")]
    default = [m for m in DEFAULT_METRICS if m in curves] or curves[:2]
    metrics = st.multiselect("metrics", curves, default=default, key="train_metrics")
    latest = []
    for name, frame in frames.items():
        last = frame.iloc[-1]
        row = {"run": name, "steps": len(frame), "last step": last["step"]}
        for metric in metrics:
            row[metric] = last.get(metric)
        latest.append(row)
    st.dataframe(pd.DataFrame(latest), hide_index=True, key="train_latest")
    for metric in metrics:
        long = pd.concat(
            [
                pd.DataFrame({"run": name, "step": f["step"], "value": f[metric]})
                for name, f in frames.items()
                if metric in f.columns
            ]
        ).dropna()
        chart = (
            alt.Chart(long)
            .mark_line(point=len(long) < 60)
            .encode(
                x=STEP_AXIS,
                y=alt.Y("value:Q", title=metric),
                color=alt.Color("run:N", title=None),
            )
            .properties(height=220, title=metric)
        )
        st.altair_chart(chart)
    _win_rates(frames)
    _exploitability(frames, "step", key="train_exploit")
    _card_use(frames, "step")


def _win_rates(frames: dict[str, pd.DataFrame]) -> None:
    tables = [data.win_rate_table(f).assign(run=name) for name, f in frames.items()]
    wins = pd.concat(tables) if tables else pd.DataFrame()
    if wins.empty:
        st.caption("no in-training evaluation (`eval/.../win`) in these runs' metrics")
        return
    st.subheader("Win rate against each opponent")
    wins = wins.assign(
        series=wins["run"] + " · " + wins["game"] + " · " + wins["opponent"] + " · " + wins["seat"]
    )
    line = (
        alt.Chart(wins)
        .mark_line(point=True)
        .encode(
            x=STEP_AXIS,
            y=alt.Y("win:Q", title="win rate", scale=alt.Scale(domain=[0, 1])),
            color="series:N",
        )
    )
    band = (
        alt.Chart(wins.dropna(subset=["ci_low", "ci_high"]))
        .mark_area(opacity=0.2)
        .encode(
            x=STEP_AXIS, y=alt.Y("ci_low:Q", title="win rate"), y2="ci_high:Q", color="series:N"
        )
    )
    st.altair_chart((band + line).properties(height=260))
    keys = ["run", "game", "opponent", "seat"]
    last = wins.sort_values("step").groupby(keys, as_index=False).last()
    st.dataframe(
        last[[*keys, "step", "win", "ci_low", "ci_high"]],
        hide_index=True,
        key="train_wins",
    )


def _curves_view(root: Path, loop_runs: list[data.RunEntry]) -> None:
    names = [r.name for r in loop_runs]
    chosen = st.multiselect("loop runs", names, default=names[:4], key="loop_runs")
    frames: dict[str, pd.DataFrame] = {}
    for run in loop_runs:
        if run.name not in chosen or run.curve_file is None:
            continue
        loaded = cache.curve(root, run.curve_file)
        malformed_note(loaded.malformed, f"{run.name}/{run.curve_file.name}")
        st.markdown(f"**{run.name}** (`{run.curve_file.name}`)")
        frame = pd.DataFrame(loaded.rows)
        if frame.empty:
            st.info("no rows yet")
            continue
        st.dataframe(frame, hide_index=True, key=f"curve_{run.name}")
        frames[run.name] = frame
    # Overlay the runs, one chart per metric, against the first step-like column they share.
    shared_x = [c for c in CURVE_X if all(c in f.columns for f in frames.values())]
    if not frames or not shared_x:
        return
    x = shared_x[0]
    metrics: list[str] = []
    for frame in frames.values():
        metrics += [c for c in data.numeric_columns(frame, exclude=(x,)) if c not in metrics]
    numeric_x = all(pd.api.types.is_numeric_dtype(f[x]) for f in frames.values())
    _exploitability(frames, x, key="loop_exploit")
    _card_use(frames, x)
    for metric in metrics:
        long = pd.concat(
            [
                pd.DataFrame({"run": name, x: f[x], "value": f[metric]})
                for name, f in frames.items()
                if metric in f.columns
            ]
        ).dropna()
        chart = (
            alt.Chart(long)
            .mark_line(point=True)
            .encode(
                x=f"{x}:{'Q' if numeric_x else 'O'}",
                y=alt.Y("value:Q", title=metric),
                color=alt.Color("run:N", title=None),
            )
            .properties(height=220, title=metric)
        )
        st.altair_chart(chart)


def _exploitability(frames: dict[str, pd.DataFrame], x: str, *, key: str) -> None:
    """Exploitability per run and game (or loop item) with its 95% band, and the last values."""
    tables = [data.exploitability_table(f, x).assign(run=name) for name, f in frames.items()]
    table = pd.concat(tables) if tables else pd.DataFrame()
    if table.empty:
        return
    st.subheader("Exploitability (0 = a Nash equilibrium)")
    table = table.assign(series=table["run"] + " · " + table["series"])
    numeric_x = pd.api.types.is_numeric_dtype(table["x"])
    axis = alt.X("x:Q" if numeric_x else "x:O", title=x)
    line = (
        alt.Chart(table)
        .mark_line(point=True)
        .encode(x=axis, y=alt.Y("exploitability:Q", title="exploitability"), color="series:N")
    )
    band = (
        alt.Chart(table.dropna(subset=["ci_low", "ci_high"]))
        .mark_area(opacity=0.2)
        .encode(x=axis, y="ci_low:Q", y2="ci_high:Q", color="series:N")
    )
    st.altair_chart((band + line).properties(height=260))
    last = table.sort_values("x").groupby("series", as_index=False).last()
    columns = ["series", "x", "exploitability", "ci_low", "ci_high", "nash_conv"]
    st.dataframe(last[columns].rename(columns={"x": x}), hide_index=True, key=key)


def _card_use(frames: dict[str, pd.DataFrame], x: str) -> None:
    """P(action | information state) over training: a card-blind policy shows as one colour down
    a column (the same share whatever the card)."""
    tables = [data.action_share_table(f, x).assign(run=name) for name, f in frames.items()]
    table = pd.concat(tables) if tables else pd.DataFrame()
    if table.empty:
        return
    st.subheader("Card use: P(action | information state)")
    for (run, game), part in table.groupby(["run", "game"], sort=True):
        actions = sorted(part["action"].unique())
        action = actions[-1]  # Kuhn: BET, Leduc: RAISE (the aggressive move)
        shown = part[part["action"] == action]
        chart = (
            alt.Chart(shown)
            .mark_rect()
            .encode(
                x=alt.X("x:O", title=x),
                y=alt.Y("state:N", title="state", sort="ascending"),
                color=alt.Color("share:Q", title=f"P({action})", scale=alt.Scale(domain=[0, 1])),
                tooltip=["state", "x", "share"],
            )
            .properties(height=22 * shown["state"].nunique() + 40, title=f"{run} · {game}")
        )
        st.altair_chart(chart)
        latest = part[part["x"] == part["x"].max()]
        pivot = latest.pivot_table(index="state", columns="action", values="share")
        st.dataframe(pivot.round(2), key=f"card_use_{run}_{game}")
