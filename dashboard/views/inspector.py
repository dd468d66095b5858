"""Training inspector: what a tree step compared. The collapse signals over steps (over the
sampled branches; the forced ones counted apart); then, for one step, its states, and at one
state the K branches of a group side by side with their reply, action, reward, return, advantage,
whether the update trained on them and whether all-actions forced them; the episode's replay and
the state's row of the policy panel one click away; and the state across every logged step.

`?page=inspector&run=NAME&step=N&state=KEY` opens a run, a step and a state directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from core import branch_log
from dashboard import cache, data, defaults
from dashboard.data import branches as inspected
from dashboard.data.policy import policy_row_label, policy_state_of
from dashboard.views.common import PALETTE, empty_state, fmt, legend, show_table, sized

MAX_STATES = 500  # options offered in the state picker
HINT = "branches"
ROW_PX = 68  # a table row three lines high: Streamlit wraps a cell's text above 64 px
SHOWN_ROWS = 8  # table rows in view before it scrolls
POLICY_ANCHOR = "policy-against-equilibrium"
# The states table at 1400 px: the state's label first (pinned, wrapped), numbers narrow.
STATE_COLUMNS = {
    "label": ("state", 170),
    "player": ("player", 58),
    "game": ("game", 96),
    "groups": ("groups", 58),
    "branches": ("branches", 68),
    "forced": ("forced", 54),
    "invalid": ("invalid", 54),
    "actions": ("sampled actions", 120),
    "entropy_bits": ("entropy", 62),
    "return_min": ("return min", 74),
    "return_max": ("return max", 74),
    "flat_groups": ("flat groups", 74),
    "trained": ("trained", 62),
}
OVER_STEPS_COLUMNS = {
    "step": ("step", 52),
    "groups": ("groups", 58),
    "branches": ("branches", 68),
    "forced": ("forced", 54),
    "invalid": ("invalid", 54),
    "actions": ("sampled actions", 150),
    "entropy_bits": ("entropy", 62),
    "return_mean": ("return mean", 80),
    "return_min": ("return min", 74),
    "return_max": ("return max", 74),
    "flat_groups": ("flat groups", 74),
    "trained": ("trained", 62),
}
ROUNDED = {"entropy_bits": 2, "return_mean": 2, "return_min": 2, "return_max": 2}
CONTRAST = alt.Scale(range=PALETTE)  # the dashboard's palette: every hue 3:1 on white


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Training inspector")
    logged = [r for r in runs if r.kind == "train" and inspected.has_branches(r.path)]
    if not logged:
        empty_state("no training run with branch logs yet (tree-sampled runs write them)", HINT)
        return
    run = defaults.pick_run("training run", logged, root, key="inspector_run")
    metrics = cache.metrics(root, run.path / data.METRICS_FILE)
    _signals(root, run, metrics)

    steps = branch_log.logged_steps(run.path)
    step = st.select_slider("step", steps, value=_requested_step(steps), key="inspector_step")
    lines = cache.branches(root, run.path, step)
    if not lines:
        st.info(f"step {step}'s branch log could not be read")
        return
    _step_summary(lines)
    states = inspected.states_table(lines)
    st.subheader(f"States of step {step}")
    _table(states.drop(columns=["state"]), STATE_COLUMNS, key="inspector_states")
    st.caption(
        "sampled actions and their entropy: the branches the policy sampled (forced: the ones "
        "all-actions rewrote); returns, flat groups and trained: every branch, as the update "
        "compared them"
    )
    picked = _pick_state(states.head(MAX_STATES))
    groups = inspected.groups_at(lines, picked)
    first = groups[0][0]
    _policy_link(run, metrics, first)
    group = _pick_group(groups)
    _branches_side_by_side(group, run, step)
    _across_steps(root, run, picked, inspected.state_label(first))


def _requested_step(steps: list[int]) -> int:
    raw = st.query_params.get("step")
    if raw is not None and str(raw).isdigit() and int(raw) in steps:
        return int(raw)
    return steps[-1]


def _pick_state(offered: pd.DataFrame) -> str:
    labels = {
        row["state"]: f"{row['label']} · {row['player']} · {row['game']} "
        f"({row['groups']} group{'s' if row['groups'] != 1 else ''}, {row['actions'] or '-'})"
        for row in offered.to_dict("records")
    }
    keys = list(labels)
    requested = st.query_params.get("state")
    return st.selectbox(
        "state",
        keys,
        index=keys.index(requested) if requested in labels else _liveliest(offered),
        format_func=labels.__getitem__,
        key="inspector_state",
    )


def _pick_group(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    if len(groups) == 1:
        return groups[0]
    names = [f"episode {g[0]['episode']} · turn {g[0]['turn']}" for g in groups]
    which = st.selectbox(
        "group", range(len(groups)), format_func=names.__getitem__, key="inspector_group"
    )
    return groups[which]


def _liveliest(states: pd.DataFrame) -> int:
    """The state shown first: the one with the widest spread of returns (a real comparison)."""
    if states.empty:
        return 0
    spread = states["return_max"] - states["return_min"]
    return int(spread.to_numpy().argmax())


def _table(frame: pd.DataFrame, columns: dict[str, tuple[str, int]], *, key: str) -> None:
    """A table that fits the page at 1400 px: the first column pinned, long text wrapped in
    rows three lines high, numbers rounded to what they mean."""
    shown = frame.copy()
    for column, digits in ROUNDED.items():
        if column in shown.columns:
            shown[column] = pd.to_numeric(shown[column], errors="coerce").round(digits)
    if "game" in shown.columns and shown["game"].nunique() <= 1:
        shown = shown.drop(columns=["game"])  # said in the state picker; room for the rest
    order = [column for column in columns if column in shown.columns]
    config = {c: _column(shown[c], *columns[c], i == 0) for i, c in enumerate(order)}
    show_table(
        shown[order],
        key=key,
        column_config=config,
        row_height=ROW_PX,
        height=38 + ROW_PX * min(len(shown), SHOWN_ROWS),
    )


def _column(values: pd.Series, title: str, width: int, pinned: bool) -> Any:
    """A column's look: its title and width; a rounded figure with its decimals shown (a column
    with a gap is text, "-" in the gap: `show_table`)."""
    digits = ROUNDED.get(str(values.name))
    if digits is not None and values.notna().all():
        return st.column_config.NumberColumn(
            title, width=width, pinned=pinned, format=f"%.{digits}f"
        )
    return st.column_config.Column(title, width=width, pinned=pinned)


def _signals(root: Path, run: data.RunEntry, metrics: pd.DataFrame) -> None:
    from_metrics = inspected.metrics_signals_are_sampled(metrics, run.config)
    if from_metrics:
        long = inspected.signals_frame(metrics)
    else:  # the run's metrics count forced branches: from the logs, without them
        digests = cache.step_digests(root, run.path)
        by_step = {step: digest.signals for step, digest in digests.items()}
        long = inspected.signals_frame(inspected.logged_signals(by_step))
    if long.empty:
        return
    st.subheader("Collapse signals per step")
    left, right = st.columns(2)
    shares = long[long["signal"].isin(inspected.SHARE_SIGNALS)]
    left.altair_chart(_over_steps(shares, "share", (0, 1)), width="stretch")
    entropy = long[long["signal"] == "action_entropy_bits"]
    right.altair_chart(_over_steps(entropy, "action entropy per state (bits)"), width="stretch")
    meanings = "; ".join(f"{name}: {meaning}" for name, meaning in inspected.SIGNALS.items())
    where = (
        "from metrics.jsonl, over every group of the step (before the log's bound)"
        if from_metrics
        else "recomputed from the branch logs (at most 256 groups a step), since this run's "
        "metrics count forced branches"
    )
    st.caption(
        f"{meanings}. Over the sampled branches of groups of two or more; {where}."
        + _forced_note(entropy)
    )


def _forced_note(entropy: pd.DataFrame) -> str:
    forced = pd.to_numeric(entropy["forced"], errors="coerce").dropna()
    if forced.empty or forced.sum() == 0:
        return ""
    return (
        f" Left out: {int(forced.sum()):,} forced branches (all-actions rewrote their answer), "
        f"{forced.mean():.1f} a step."
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
            color=alt.Color("signal:N", legend=legend(1), scale=CONTRAST)
            if several
            else alt.value("#1f77b4"),
            tooltip=[
                "step",
                "signal",
                alt.Tooltip("value:Q", format=".3f"),
                alt.Tooltip("forced:Q", title="forced (left out)"),
            ],
        ),
        200,
    )


def _step_summary(lines: list[dict[str, Any]]) -> None:
    signals = inspected.step_signals(lines)
    cells = st.columns(5)
    cells[0].metric("branches logged", len(lines))
    cells[1].metric(
        "forced (left out)",
        int(signals.get(inspected.FORCED, 0)),
        help="branches whose answer all-actions rewrote: not counted in the signals",
    )
    for cell, name in zip(cells[2:], inspected.SIGNALS, strict=True):
        value = signals.get(f"{branch_log.SIGNAL_PREFIX}{name}")
        cell.metric(name.replace("_", " "), fmt(value, 2))


def _policy_link(run: data.RunEntry, metrics: pd.DataFrame, line: dict[str, Any]) -> None:
    """The state's row in the run's policy panel (Training page), when the run records one."""
    game = str(line.get("game") or "")
    title = policy_state_of(game, str(line.get("observation") or ""))
    if title is None:
        return
    row = policy_row_label(game, title)
    if any(str(c).startswith(f"policy/{game}/{title}/") for c in metrics.columns):
        url = defaults.link("training", run=run.name, policy_state=title, anchor=POLICY_ANCHOR)
        st.markdown(f"policy panel: [{row} of {run.name}]({url})")
        return
    url = defaults.link("training", anchor=POLICY_ANCHOR)
    st.caption(
        f"policy panel row {row}: this run records no policy (no in-training evaluation); "
        f"a loop's panel that measured it: [Training]({url})"
    )


def _replay_link(run: data.RunEntry, step: int, first: dict[str, Any]) -> str | None:
    """The Games page's replay of the group's episode at this turn (game runs only)."""
    if first.get("role") or run.config.get("workflow") or not run.config.get("games"):
        return None
    url = defaults.link(
        "games",
        run=run.name,
        step=step,
        seed=first.get("episode"),
        seat_turn=f"{first.get('seat')}:{first.get('turn')}",
    )
    return f"[replay episode {first.get('episode')} at this turn]({url})"


def _branches_side_by_side(group: list[dict[str, Any]], run: data.RunEntry, step: int) -> None:
    first = group[0]
    st.subheader(f"{len(group)} branches at {inspected.state_label(first)}")
    replay = _replay_link(run, step, first)
    if replay:
        st.markdown(replay)
    if first.get("observation"):
        with st.expander("what the player was shown", expanded=False):
            st.text(first["observation"])
    for column, branch in zip(st.columns(len(group)), group, strict=True):
        with column:
            _branch(branch)


def _branch(branch: dict[str, Any]) -> None:
    tag = " (main line)" if branch.get("chosen") else ""
    forced = inspected.is_forced(branch)
    st.markdown(f"**branch {branch['branch']}{tag}**" + (" · :orange[forced]" if forced else ""))
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
                ("forced", "yes (all-actions rewrote its answer)" if forced else "no"),
            )
        )
    )
    if branch.get("reasoning"):
        with st.expander("reasoning"):
            st.text(branch["reasoning"])
    st.text(branch.get("reply") or "(empty reply)")


def _across_steps(root: Path, run: data.RunEntry, state: str, label: str) -> None:
    """The picked state at every logged step: the sampled actions' shares, and a row a step."""
    digests = cache.step_digests(root, run.path)
    table = inspected.state_over_steps(digests, state)
    st.subheader(f"{label}: across steps")
    if table.empty:
        st.info("no logged step sampled this state")
        return
    shares = inspected.action_shares_over_steps(digests, state)
    if not shares.empty:
        st.altair_chart(_shares_chart(shares), width="stretch")
    _table(table, OVER_STEPS_COLUMNS, key="inspector_over_steps")
    st.caption(
        f"{len(table)} of {len(digests)} logged steps sampled this state (the same prompt: one "
        "information state of one seat)"
    )
    if st.toggle("every branch at this state, step by step", key="inspector_all_branches"):
        by_step = {step: cache.branches(root, run.path, step) for step in sorted(digests)}
        show_table(inspected.branches_over_steps(by_step, state), key="inspector_branch_list")


def _shares_chart(shares: pd.DataFrame) -> alt.TopLevelMixin:
    """Each sampled action's share of the state's branches, one line an action over steps."""
    return sized(
        alt.Chart(shares)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", axis=alt.Axis(format="d", tickMinStep=1)),
            y=alt.Y("share:Q", title="share of sampled branches", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("action:N", legend=legend(4), scale=CONTRAST),
            tooltip=["step", "action", "count", alt.Tooltip("share:Q", format=".2f")],
        ),
        180,
    )
