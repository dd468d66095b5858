"""The policy against equilibrium (Training page): for each run's poker policy, every information
state grouped by player and history, checkpoints as columns, the equilibrium range beside them
and the deviations outlined; OpenSpiel's best response per state at a checkpoint; run A minus
run B. The computations are `dashboard/data/policy.py` and `dashboard/data/equilibrium.py`."""

from __future__ import annotations

from typing import Any, NamedTuple

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import data
from dashboard.views.common import display_frame, show_table, sized

NASH_COLUMN = "Nash"
ROW_HEIGHT = 20
CELL_TEXT_UP_TO = 12  # checkpoints: beyond this the cells are too narrow for their numbers
FLAG_STYLE = "background-color: #f8d0d0; font-weight: bold"
MARKED_STYLE = "background-color: #fff3bf; font-weight: 600"  # the state asked for
GRID_CHECKPOINTS = 6  # checkpoint columns of the grid that fit 1400 px beside its other columns
OUTSIDE_SHOWN = 4  # flagged checkpoints listed in a grid row


class _Policy(NamedTuple):
    view: data.PolicyView
    shares: pd.DataFrame  # action_share_table of the run and series
    frame: pd.DataFrame  # the run's metrics or curve
    series: str


def render(frames: dict[str, pd.DataFrame], x: str, *, key: str) -> None:
    tables = [data.action_share_table(f, x).assign(run=name) for name, f in frames.items()]
    tables = [t for t in tables if not t.empty]  # an empty one would make every column objects
    if not tables:
        return
    table = pd.concat(tables, ignore_index=True)
    st.subheader("Policy against equilibrium")
    st.caption(
        "P(bet or call) at every information state (Kuhn; Leduc: each action, per private card "
        "as the trainer records it), checkpoints as columns, the equilibrium range in the last "
        "column. A red outline: the state lies outside its range by more than the slack."
    )
    slack = st.number_input(
        "flag a deviation above (slack for sampling noise)",
        min_value=0.0,
        max_value=1.0,
        value=0.05,
        step=0.01,
        key=f"{key}_slack",
    )
    views: dict[str, _Policy] = {}
    for (run, series), shares in table.groupby(["run", "game"], sort=True):
        view = data.policy_view(shares, data.game_of(series), slack)
        name = f"{run} · {series}"
        views[name] = _Policy(view, shares, frames[run], series)
        _heatmap(view, name, x)
        _deviations(view, x)
        _grid(view, key=f"{key}_grid_{name}")
    _best_response(views, x, key=key)
    _difference(views, key=key)


def _height(rows: int) -> int:
    """Every row in view up to 20 (Streamlit's rows are 35 px), then a scroll."""
    return 38 + 35 * min(rows, 20)


def _digits(digits: int) -> dict[str, Any]:
    """Numbers shown to `digits` decimals (the table's values stay exact)."""
    number = st.column_config.NumberColumn(format=f"%.{digits}f")
    return {
        column: number
        for column in (
            "value of best response",
            "value of policy",
            "reach",
            "gain",
            "A",
            "B",
            "A - B",
            "A deviation",
            "B deviation",
        )
    }


def _short(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _range_text(low: Any, high: Any) -> str:
    """ "0.33" for a single value, "[0, 0.33]" for a range, "-" for none."""
    if low is None or pd.isna(low):
        return "-"
    if abs(high - low) < 1e-9:
        return _short(low)
    return f"[{_short(low)}, {_short(high)}]"


def _heatmap(view: data.PolicyView, title: str, x: str) -> None:
    """Rows in the grid's order (all of the game's states, recorded or not), one column per
    checkpoint and the equilibrium range as the last column."""
    labels = [r.label for r in view.rows]
    columns = [data.x_text(v) for v in view.xs] + [NASH_COLUMN]
    cells = view.long.assign(column=view.long["x"].map(data.x_text))
    bounds = {r.label: _bounds(view, r) for r in view.rows}
    nash = pd.DataFrame(
        [
            {"label": label, "column": NASH_COLUMN, "range": _range_text(*b)}
            for label, b in bounds.items()
        ]
    )
    x_axis = alt.X("column:O", title=x, sort=columns, scale=alt.Scale(domain=columns))
    y_axis = alt.Y("label:N", title=None, sort=labels, scale=alt.Scale(domain=labels))
    colour = alt.Color(
        "share:Q",
        title=data.aggressive_title(view.game),
        scale=alt.Scale(domain=[0, 1], scheme="blues"),
    )
    tooltip = ["label", "column", "share", "low", "high", "deviation"]
    rect = alt.Chart(cells).mark_rect().encode(x=x_axis, y=y_axis, color=colour, tooltip=tooltip)
    layers: list[alt.Chart] = [rect]
    if len(view.xs) <= CELL_TEXT_UP_TO:
        layers.append(
            alt.Chart(cells)
            .mark_text(fontSize=10)
            .encode(
                x=x_axis,
                y=y_axis,
                text=alt.Text("share:Q", format=".2f"),
                color=alt.condition("datum.share > 0.6", alt.value("white"), alt.value("black")),
            )
        )
    flagged = cells[cells["flagged"]]
    if not flagged.empty:
        layers.append(
            alt.Chart(flagged)
            .mark_rect(fill=None, stroke="#d62728", strokeWidth=2)
            .encode(x=x_axis, y=y_axis, tooltip=tooltip)
        )
    layers.append(alt.Chart(nash).mark_text(fontSize=10).encode(x=x_axis, y=y_axis, text="range:N"))
    chart = alt.layer(*layers).properties(title=title)
    st.altair_chart(sized(chart, ROW_HEIGHT * len(labels)))


def _bounds(view: data.PolicyView, row: data.PolicyRow) -> tuple[Any, Any]:
    if view.reference is None:
        return None, None
    return view.reference.ranges.get(row.state, {}).get(row.action, (None, None))


def _deviations(view: data.PolicyView, x: str) -> None:
    if view.reference is None:
        st.caption("no equilibrium known for this game")
        return
    st.caption(f"equilibrium: {view.reference.source}")
    alphas = data.kuhn_alphas(view)
    if len(alphas) == len(data.KUHN_ALPHA):
        implied = ", ".join(f"{a:.2f} ({title})" for title, a in alphas.items())
        spread = max(alphas.values()) - min(alphas.values())
        st.caption(
            f"player 0's mixed states imply alpha = {implied}: one equilibrium needs one alpha "
            f"in [0, 1/3] (spread {spread:.2f})"
        )
    found = data.last_deviations(view)
    if not found:
        st.caption("at its last checkpoint every state lies within its range (+- the slack)")
        return
    lines = [
        f"- **{d['label']}**: {d['share']:.2f} at {x} {data.x_text(d['x'])}, range "
        f"{_range_text(d['low'], d['high'])}, off by {d['deviation']:+.2f}"
        for d in found
    ]
    st.markdown(
        f"**{len(found)} state{'s' if len(found) != 1 else ''} outside the equilibrium** at "
        "the last checkpoint:\n" + "\n".join(lines)
    )


def _grid(view: data.PolicyView, *, key: str) -> None:
    grid = _fitting(data.policy_grid(view), [data.x_text(x) for x in view.xs])
    shown = display_frame(grid)
    flagged = {
        (r["label"], data.x_text(r["x"])) for _, r in view.long[view.long["flagged"]].iterrows()
    }
    labels = [r.label for r in view.rows]
    # a state opened from the Inspector (`?policy_state=`): its rows marked
    asked = str(st.query_params.get("policy_state") or "")
    marked = {r.label for r in view.rows if asked and r.state == asked}
    if marked:
        st.caption(f"marked: {asked}, the state opened from the Inspector")

    def style(frame: pd.DataFrame) -> pd.DataFrame:
        css = pd.DataFrame("", index=frame.index, columns=frame.columns)
        for i, label in enumerate(labels):
            for column in frame.columns:
                if (label, column) in flagged:
                    css.iloc[i, frame.columns.get_loc(column)] = FLAG_STYLE
                elif label in marked:
                    css.iloc[i, frame.columns.get_loc(column)] = MARKED_STYLE
        return css

    styled = shown.style.apply(style, axis=None).format(precision=3)
    st.dataframe(styled, hide_index=True, key=key, height=_height(len(shown)))


def _fitting(grid: pd.DataFrame, checkpoints: list[str]) -> pd.DataFrame:
    """The grid with at most GRID_CHECKPOINTS checkpoint columns (the first and the last ones)
    and its flagged checkpoints listed as far as they fit, so that it fits 1400 px; the heatmap
    above draws every checkpoint."""
    if len(checkpoints) > GRID_CHECKPOINTS:
        kept = {checkpoints[0], *checkpoints[1 - GRID_CHECKPOINTS :]}
        grid = grid.drop(columns=[c for c in checkpoints if c not in kept])
        st.caption(
            f"the table: {GRID_CHECKPOINTS} of {len(checkpoints)} checkpoints (the first and the "
            "last ones); the heatmap has them all"
        )
    return grid.assign(**{"outside at": grid["outside at"].map(_outside)})


def _outside(listed: str) -> str:
    """'0, 10, 20, 30, 40' as '0, 10, ... 40 (5)' past OUTSIDE_SHOWN checkpoints."""
    found = [x for x in listed.split(", ") if x]
    if len(found) <= OUTSIDE_SHOWN:
        return listed
    return f"{', '.join(found[: OUTSIDE_SHOWN - 1])}, ... {found[-1]} ({len(found)})"


def _best_response(views: dict[str, _Policy], x: str, *, key: str) -> None:
    """OpenSpiel's best response to one run's policy at one checkpoint, state by state."""
    complete = {}
    for name, (view, shares, _, _) in views.items():
        if view.game is None:
            continue
        xs = [v for v in view.xs if data.policy_table_at(shares, view.game, v) is not None]
        if xs:
            complete[name] = xs
    if not complete:
        return
    st.markdown("**Best response per state** (OpenSpiel, against the checkpoint's policy)")
    names = list(complete)
    name = names[0] if len(names) == 1 else st.selectbox("policy", names, key=f"{key}_br_run")
    view, shares, frame, series = views[name]
    xs = complete[name]
    step = (
        xs[-1]
        if len(xs) == 1
        else st.select_slider(x, xs, value=xs[-1], format_func=data.x_text, key=f"{key}_br_x")
    )
    table = data.policy_table_at(shares, view.game, step)
    states = data.best_response_by_state(view.game, table)
    nash_conv = float(states["gain"].sum())
    recorded = _recorded_exploitability(frame, x, step, series)
    st.caption(
        f"{x} {data.x_text(step)}: NashConv {nash_conv:.4f}, exploitability "
        f"{nash_conv / 2:.4f} (the gains add up to NashConv){recorded}. Values are "
        "counterfactual (weighted by chance and the other seat's reach), both followed by best "
        "play; gain = the policy's own reach x (best response - policy)."
    )
    show_table(states, key=f"{key}_br_table", height=_height(len(states)), column_config=_digits(4))


def _recorded_exploitability(frame: pd.DataFrame, x: str, step: Any, series: str) -> str:
    table = data.exploitability_table(frame, x)
    rows = table[(table["x"] == step) & table["series"].map(lambda s: series.endswith(s))]
    if rows.empty:
        return ""
    return f"; recorded by the run: {rows.iloc[0]['exploitability']:.4f}"


def _difference(views: dict[str, _Policy], *, key: str) -> None:
    """Run A minus run B: the per-state difference of their last checkpoints, same game."""
    names = [n for n, p in views.items() if p.view.game is not None]
    if len(names) < 2:
        return
    st.markdown("**Run A minus run B** (last checkpoint of each)")
    left, right = st.columns(2)
    first = left.selectbox("A", names, index=0, key=f"{key}_diff_a")
    second = right.selectbox("B", names, index=1, key=f"{key}_diff_b")
    a, b = views[first].view, views[second].view
    if a.game != b.game:
        st.info(f"A is {a.game} and B is {b.game}: pick two policies of one game")
        return
    diff = data.policy_difference(a, b)
    show_table(diff, key=f"{key}_diff_table", height=_height(len(diff)), column_config=_digits(3))
    drawn = diff.dropna(subset=["A - B"])
    if drawn.empty:
        return
    labels = [r.label for r in a.rows]
    bars = (
        alt.Chart(drawn)
        .mark_bar()
        .encode(
            x=alt.X(
                "A - B:Q", scale=alt.Scale(domain=[-1, 1]), title=data.aggressive_title(a.game)
            ),
            y=alt.Y("state:N", sort=labels, title=None),
            color=alt.condition("datum['A - B'] > 0", alt.value("#1f77b4"), alt.value("#d62728")),
            tooltip=list(drawn.columns),
        )
        .properties(title=f"{first} minus {second}")
    )
    st.altair_chart(sized(bars, ROW_HEIGHT * len(drawn)))
