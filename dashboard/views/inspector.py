"""Training inspector: what a tree step compared. The collapse signals over steps; then, for one
step, its states, and at one state the K branches of a group side by side with their reply,
action, reward, return, advantage and whether the update trained on them.

`?page=inspector&run=NAME&step=N&state=KEY` opens a step and a state directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from core import branch_log
from dashboard import cache, data
from dashboard.data import branches as inspected
from dashboard.views.common import empty_state, fmt, legend, pick_run, show_table, sized

MAX_STATES = 500  # options offered in the state picker
HINT = "branches"


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Training inspector")
    logged = [r for r in runs if r.kind == "train" and inspected.has_branches(r.path)]
    if not logged:
        empty_state("no training run with branch logs yet (tree-sampled runs write them)", HINT)
        return
    run = pick_run("training run", logged, root, key="inspector_run")
    _signals(cache.metrics(root, run.path / data.METRICS_FILE))

    steps = branch_log.logged_steps(run.path)
    step = st.select_slider("step", steps, value=_requested_step(steps), key="inspector_step")
    lines = cache.branches(root, run.path, step)
    if not lines:
        st.info(f"step {step}'s branch log could not be read")
        return
    _step_summary(lines)
    states = inspected.states_table(lines)
    st.subheader(f"States of step {step}")
    show_table(states.drop(columns=["state"]), hide_index=True, key="inspector_states")
    offered = states.head(MAX_STATES)
    labels = {
        row["state"]: f"{row['label']} · {row['player']} · {row['game']} "
        f"({row['groups']} group{'s' if row['groups'] != 1 else ''}, {row['actions']})"
        for row in offered.to_dict("records")
    }
    keys = list(labels)
    requested = st.query_params.get("state")
    picked = st.selectbox(
        "state",
        keys,
        index=keys.index(requested) if requested in labels else _liveliest(offered),
        format_func=labels.__getitem__,
        key="inspector_state",
    )
    groups = inspected.groups_at(lines, picked)
    if len(groups) > 1:
        names = [f"episode {g[0]['episode']} · turn {g[0]['turn']}" for g in groups]
        which = st.selectbox(
            "group", range(len(groups)), format_func=names.__getitem__, key="inspector_group"
        )
        group = groups[which]
    else:
        group = groups[0]
    _branches_side_by_side(group)


def _requested_step(steps: list[int]) -> int:
    raw = st.query_params.get("step")
    if raw is not None and str(raw).isdigit() and int(raw) in steps:
        return int(raw)
    return steps[-1]


def _liveliest(states: pd.DataFrame) -> int:
    """The state shown first: the one with the widest spread of returns (a real comparison)."""
    if states.empty:
        return 0
    spread = states["return_max"] - states["return_min"]
    return int(spread.to_numpy().argmax())


def _signals(metrics: pd.DataFrame) -> None:
    long = inspected.signals_frame(metrics)
    if long.empty:
        return
    st.subheader("Collapse signals per step")
    left, right = st.columns(2)
    shares = long[long["signal"].isin(inspected.SHARE_SIGNALS)]
    left.altair_chart(_over_steps(shares, "share", (0, 1)), use_container_width=True)
    entropy = long[long["signal"] == "action_entropy_bits"]
    right.altair_chart(
        _over_steps(entropy, "action entropy per state (bits)"), use_container_width=True
    )
    st.caption(
        "; ".join(f"{name}: {meaning}" for name, meaning in inspected.SIGNALS.items())
        + ". Over the groups of two or more branches; computed before the log's bound."
    )


def _over_steps(
    frame: pd.DataFrame, title: str, domain: tuple[float, float] | None = None
) -> alt.TopLevelMixin:
    """One line per signal over the steps (a legend when there are several)."""
    scale = alt.Scale(domain=list(domain)) if domain else alt.Undefined
    several = frame["signal"].nunique() > 1
    return sized(
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", axis=alt.Axis(format="d", tickMinStep=1)),
            y=alt.Y("value:Q", title=title, scale=scale),
            color=alt.Color("signal:N", legend=legend(1)) if several else alt.value("#1f77b4"),
            tooltip=["step", "signal", alt.Tooltip("value:Q", format=".3f")],
        ),
        200,
    )


def _step_summary(lines: list[dict[str, Any]]) -> None:
    signals = branch_log.collapse_signals(lines)
    cells = st.columns(4)
    cells[0].metric("branches logged", len(lines))
    for cell, name in zip(cells[1:], inspected.SIGNALS, strict=True):
        value = signals.get(f"{branch_log.SIGNAL_PREFIX}{name}")
        cell.metric(name.replace("_", " "), fmt(value, 2))


def _branches_side_by_side(group: list[dict[str, Any]]) -> None:
    first = group[0]
    st.subheader(f"{len(group)} branches at {inspected.state_label(first)}")
    if first.get("observation"):
        with st.expander("what the player was shown", expanded=False):
            st.text(first["observation"])
    for column, branch in zip(st.columns(len(group)), group, strict=True):
        with column:
            tag = " (main line)" if branch.get("chosen") else ""
            st.markdown(f"**branch {branch['branch']}{tag}**")
            st.markdown(
                "\n".join(
                    f"- {name}: `{value}`"
                    for name, value in (
                        ("action", fmt(branch.get("action"))),
                        ("legal", fmt(branch.get("legal"))),
                        ("reward", fmt(branch.get("reward"), 2)),
                        ("return", fmt(branch.get("return"), 2)),
                        ("advantage", f"{branch['advantage']:+.3f}"),
                        ("trained", "yes" if branch.get("trained") else "no"),
                    )
                )
            )
            if branch.get("reasoning"):
                with st.expander("reasoning"):
                    st.text(branch["reasoning"])
            st.text(branch.get("reply") or "(empty reply)")
