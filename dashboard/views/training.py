"""Training page: metrics.jsonl curves of train runs overlaid on one step axis with their
exploitability and win rates, the policy against equilibrium (views/policy.py), MAS training runs
role by role (views/mas_training.py), loop learning curves."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import cache, data
from dashboard.data.training import curve_table, last_values_tables
from dashboard.views import mas_training, policy
from dashboard.views.common import (
    empty_state,
    legend,
    malformed_note,
    numeric,
    show_table,
    sized,
    step_x,
)

DEFAULT_METRICS = ("reward_mean", "loss", "kl", "invalid_rate", "train_accuracy")
CURVE_X = ("step", "iteration", "round", "checkpoint_step", "checkpoint")
CHARTS_PER_ROW = 2
FIGURES_PER_TABLE = 6  # figure columns of one last-values table: more would not fit 1400 px
CURVE_COLUMNS = 7  # checkpoints of a loop's table (the first and the last): what fits
CURVE_ROWS = 8  # figures of a loop's table in view; the rest scroll
# Figures with a section of their own (the exploitability chart above the family charts).
DRAWN_APART = ("exploitability", "exploitability_avg")
TOOLTIP = ["series", "x", "value", "ci_low", "ci_high"]


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
    asked = st.query_params.get("run")  # a link from another page (the Inspector's states)
    default = [asked] if asked in names else names[:4]
    chosen = st.multiselect("train runs", names, default=default, key="train_runs")
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
    plans = {
        name: data.plan_families(
            [c for c in data.numeric_columns(f) if not c.startswith("eval/")], curve=False
        )
        for name, f in frames.items()
    }
    figures = _figures(plans)
    default = [m for m in DEFAULT_METRICS if m in figures] or figures[:2]
    metrics = st.multiselect(
        "metrics (one chart per figure; its per-game and per-seat splits drawn together)",
        figures,
        default=default,
        key="train_metrics",
    )
    _last_values(frames, plans, metrics)
    # Every chart over steps spans the same steps, exploitability's included (it is measured at
    # evaluation steps only), so a change in one lines up with the others.
    steps = alt.Scale(domain=_step_domain(frames))
    _family_charts(frames, plans, metrics, "step", scale=steps)
    _exploitability(frames, "step", key="train_exploit", scale=steps)
    _folded_note(plans)
    _win_rates(frames, steps)
    policy.render(frames, "step", key="train_policy")


def _last_values(
    frames: dict[str, pd.DataFrame], plans: dict[str, data.FamilyPlan], metrics: list[str]
) -> None:
    """The chosen figures' last values: per run, then per split (game and seat, role)."""
    runs, splits = last_values_tables(frames, plans, metrics)
    figures = list(runs.columns[3:])
    for i in range(0, max(len(figures), 1), FIGURES_PER_TABLE):
        columns = ["run", "steps", "last step"] if i == 0 else ["run"]
        chunk = runs[columns + figures[i : i + FIGURES_PER_TABLE]]
        show_table(chunk, key="train_latest" if i == 0 else f"train_latest_{i}")
    if not splits.empty:
        st.caption("last values per game and seat (or role)")
        show_table(splits, key="train_latest_splits")


def _step_domain(frames: dict[str, pd.DataFrame]) -> list[float]:
    steps = pd.concat([f["step"] for f in frames.values()])
    return [float(steps.min()), float(steps.max())]


def _win_rates(frames: dict[str, pd.DataFrame], scale: alt.Scale) -> None:
    tables = [data.win_rate_table(f).assign(run=name) for name, f in frames.items()]
    tables = [t for t in tables if not t.empty]  # an empty one would make every column objects
    wins = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if wins.empty:
        st.caption("no in-training evaluation (`eval/.../win`) in these runs' metrics")
        return
    st.subheader("Win rate against each opponent")
    axis = step_x("step", scale=scale)
    wins = wins.assign(
        series=wins["run"] + " · " + wins["game"] + " · " + wins["opponent"] + " · " + wins["seat"]
    )
    line = (
        alt.Chart(wins)
        .mark_line(point=True)
        .encode(
            x=axis,
            y=alt.Y("win:Q", title="win rate", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("series:N", legend=legend(1)),
        )
    )
    band = (
        alt.Chart(wins.dropna(subset=["ci_low", "ci_high"]))
        .mark_area(opacity=0.2)
        .encode(
            x=axis,
            y=alt.Y("ci_low:Q", title="win rate"),
            y2="ci_high:Q",
            color=alt.Color("series:N", legend=legend(1)),
        )
    )
    st.altair_chart(sized(band + line, 240))
    keys = ["run", "game", "opponent", "seat"]
    last = wins.sort_values("step").groupby(keys, as_index=False).last()
    show_table(
        last[[*keys, "step", "win", "ci_low", "ci_high"]],
        hide_index=True,
        key="train_wins",
        formats=dict.fromkeys(("win", "ci_low", "ci_high"), "%.3f"),
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
        frames[run.name] = frame
        _curve_table(frame, run.name)
    # Overlay the runs, one chart per metric, against the first step-like column they share.
    shared_x = [c for c in CURVE_X if all(c in f.columns for f in frames.values())]
    if not frames or not shared_x:
        return
    x = shared_x[0]
    _exploitability(frames, x, key="loop_exploit")
    policy.render(frames, x, key="loop_policy")
    plans = {
        name: data.plan_families(data.numeric_columns(f, exclude=(x,)), curve=True)
        for name, f in frames.items()
    }
    figures = [f for f in _figures(plans) if f not in DRAWN_APART]
    if figures:
        st.markdown("**Every figure of the curves, one chart each**")
        _family_charts(frames, plans, figures, x)
    _folded_note(plans)


def _curve_table(frame: pd.DataFrame, name: str) -> None:
    """The loop's learning curve, one row per figure and one column per checkpoint."""
    x = next((c for c in CURVE_X if c in frame.columns), None)
    if x is None:
        show_table(frame, key=f"curve_{name}")
        return
    table, checkpoints = curve_table(frame, x, CURVE_COLUMNS)
    height = 38 + 35 * min(len(table), CURVE_ROWS)  # Streamlit's rows are 35 px, its header 38
    show_table(table, key=f"curve_{name}", widths={"figure": "large"}, height=height)
    if checkpoints > CURVE_COLUMNS:
        st.caption(
            f"{CURVE_COLUMNS} of its {checkpoints} checkpoints (the first and the last ones); "
            "the charts below draw every one"
        )


def _figures(plans: dict[str, data.FamilyPlan]) -> list[str]:
    figures: list[str] = []
    for plan in plans.values():
        figures += [f for f in plan.families if f not in figures]
    return figures


def _family_charts(
    frames: dict[str, pd.DataFrame],
    plans: dict[str, data.FamilyPlan],
    figures: list[str],
    x: str,
    scale: alt.Scale | None = None,
) -> None:
    """One chart per figure, two to a row: a line per run and item, its 95% band where the
    figure has bounds."""
    drawn = [(f, _on_steps(data.family_frame(frames, plans, f, x))) for f in figures]
    drawn = [(f, long) for f, long in drawn if not long.empty]
    numeric_x = all(pd.api.types.is_numeric_dtype(long["x"]) for _, long in drawn)
    axis = step_x(title=x, scale=scale) if numeric_x else alt.X("x:O", title=x)
    for i, (figure, long) in enumerate(drawn):
        if i % CHARTS_PER_ROW == 0:
            row = st.columns(CHARTS_PER_ROW)
        color = alt.Color("series:N", legend=legend(1))
        line = (
            alt.Chart(long)
            .mark_line(point=len(long) < 60)
            .encode(x=axis, y=alt.Y("value:Q", title=figure), color=color, tooltip=TOOLTIP)
        )
        bounded = long.dropna(subset=["ci_low", "ci_high"])
        chart: alt.Chart | alt.LayerChart = line
        if not bounded.empty:
            band = (
                alt.Chart(bounded)
                .mark_area(opacity=0.2)
                .encode(x=axis, y="ci_low:Q", y2="ci_high:Q", color=color)
            )
            chart = band + line
        row[i % CHARTS_PER_ROW].altair_chart(sized(chart.properties(title=figure), 200))


def _folded_note(plans: dict[str, data.FamilyPlan]) -> None:
    bands = sum(len(p.bands) for p in plans.values())
    shares = sum(len(p.shares) for p in plans.values())
    notes = []
    if bands:
        notes.append(f"{_columns(bands)} drawn as bands on their figure")
    if shares:
        notes.append(f"{_columns(shares, '`policy/<state>/<action>` ')} in the card-use heatmap")
    if notes:
        st.caption("; ".join(notes) + ".")


def _columns(count: int, what: str = "interval ") -> str:
    return f"{count} {what}column{'' if count == 1 else 's'}"


def _exploitability(
    frames: dict[str, pd.DataFrame], x: str, *, key: str, scale: alt.Scale | None = None
) -> None:
    """Exploitability per run and game (or loop item) with its 95% band, and the last values:
    every series (the policy and the average policy, each run, each loop) in the legend."""
    tables = [data.exploitability_table(f, x).assign(run=name) for name, f in frames.items()]
    tables = [t for t in tables if not t.empty]  # an empty one would make every column objects
    if not tables:
        return
    st.subheader("Exploitability (0 = a Nash equilibrium)")
    table = _on_steps(pd.concat(tables, ignore_index=True))
    table = table.assign(series=table["run"] + " · " + table["series"])
    numeric_x = pd.api.types.is_numeric_dtype(table["x"])
    axis = step_x(title=x, scale=scale) if numeric_x else alt.X("x:O", title=x)
    color = alt.Color("series:N", legend=legend(1))  # one legend for both layers
    line = (
        alt.Chart(table)
        .mark_line(point=True)
        .encode(x=axis, y=alt.Y("exploitability:Q", title="exploitability"), color=color)
    )
    band = (
        alt.Chart(table.dropna(subset=["ci_low", "ci_high"]))
        .mark_area(opacity=0.2)
        .encode(x=axis, y="ci_low:Q", y2="ci_high:Q", color=color)
    )
    st.altair_chart(sized(band + line, 240))
    last = table.sort_values("x").groupby("series", as_index=False).last()
    columns = ["series", "x", "exploitability", "ci_low", "ci_high", "nash_conv"]
    figures = dict.fromkeys(("exploitability", "ci_low", "ci_high", "nash_conv"), "%.4f")
    show_table(last[columns].rename(columns={"x": x}), key=key, formats=figures)


def _on_steps(table: pd.DataFrame) -> pd.DataFrame:
    """The table with its `x` as numbers when every x is one (a step, an iteration), so that
    the chart's axis is numeric whatever the runs concatenated into it held."""
    steps = numeric(table["x"]) if "x" in table.columns else None
    return table if steps is None else table.assign(x=steps)
