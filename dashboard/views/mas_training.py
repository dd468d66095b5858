"""The Training page's section for MAS training runs (`mars train-mas`), role by role: each role's
return and each policy's update by step, accuracy, mean reward per role and step, and a
transcript browser whose every message shows the reward its role's call earned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from core.runstore import RECORDS_FILE
from dashboard import cache, data, mas_data
from dashboard.views.common import (
    empty_state,
    fmt,
    legend,
    malformed_note,
    show_table,
    sized,
    step_x,
)

STEP_AXIS = step_x("step")  # whole steps
STAT_TITLES = {"loss": "loss", "kl": "KL to the reference", "grad_norm": "gradient norm"}


def render(root: Path, runs: list[data.RunEntry]) -> None:
    """Nothing when no run is a MAS training run (game runs' views are untouched)."""
    mas_runs = mas_data.mas_training_runs(runs)
    if not mas_runs:
        return
    st.subheader("MAS training, role by role")
    run = _pick_run(mas_runs)
    metrics_path = run.path / data.METRICS_FILE
    records_path = run.path / RECORDS_FILE
    malformed_note(cache.jsonl(root, metrics_path).malformed, f"{run.name}/{data.METRICS_FILE}")
    malformed_note(cache.jsonl(root, records_path).malformed, f"{run.name}/{RECORDS_FILE}")
    frame = cache.metrics(root, metrics_path)
    records, table = cache.workflow_data(root, records_path)
    roles = mas_data.workflow_roles(frame, records, run.config)
    _overview(root, run, roles)
    if frame.empty:
        empty_state(f"{run.name} has no metrics yet", "train_mas")
    else:
        _role_returns(frame)
        _policy_updates(frame)
        _accuracy(frame)
    if not records:
        empty_state(f"{run.name} has no workflow records yet", "train_mas")
        return
    _role_rewards(records)
    _transcript_browser(records, table)


def _pick_run(runs: list[data.RunEntry]) -> data.RunEntry:
    """A selectbox over the MAS runs; `?run=NAME` preselects one of them (names only, no path
    is opened from the URL here)."""
    names = [run.name for run in runs]
    requested = str(st.query_params.get("run", ""))
    index = names.index(requested) if requested in names else 0
    chosen = st.selectbox("MAS training run", names, index=index, key="mas_run")
    return runs[names.index(chosen)]


def _overview(root: Path, run: data.RunEntry, roles: list[str]) -> None:
    config = run.config
    options = config.get("workflow_options") or {}
    shown = ", ".join(f"{key}={value}" for key, value in options.items()) or "defaults"
    sharing = "one policy per role" if mas_data.is_multi_policy(config) else "one shared policy"
    st.caption(
        f"workflow `{config.get('workflow')}` ({shown}) · train set "
        f"`{config.get('train_set') or '-'}` · {sharing}"
    )
    checkpoints = mas_data.policy_checkpoints(root, run.path, config, roles)
    show_table(checkpoints, hide_index=True, key="mas_checkpoints")


def _line_chart(long: pd.DataFrame, y: str, color: str, title: str) -> alt.Chart:
    chart = (
        alt.Chart(long)
        .mark_line(point=len(long) < 60)
        .encode(
            x=STEP_AXIS,
            y=alt.Y(f"{y}:Q", title=title),
            color=alt.Color(f"{color}:N", legend=legend(2)),
        )
        .properties(title=title)
    )
    return sized(chart, 200)


def _role_returns(frame: pd.DataFrame) -> None:
    curves = mas_data.role_return_curves(frame)
    if curves.empty:
        st.caption("no `return_mean/<role>` in the metrics")
        return
    st.altair_chart(_line_chart(curves, "return_mean", "role", "return by role (all branches)"))
    with st.expander("return by role: values"):
        wide = curves.pivot_table(index="step", columns="role", values="return_mean")
        show_table(wide.reset_index(), hide_index=True, key="mas_role_returns")


def _policy_updates(frame: pd.DataFrame) -> None:
    curves = mas_data.policy_update_curves(frame)
    if curves.empty:
        st.caption("no `policy/<name>/...` update figures in the metrics")
        return
    columns = st.columns(len(mas_data.UPDATE_STATS))
    for column, stat in zip(columns, mas_data.UPDATE_STATS, strict=True):
        part = curves[curves["stat"] == stat]
        if not part.empty:
            title = f"{STAT_TITLES[stat]} by policy"
            column.altair_chart(_line_chart(part, "value", "policy", title))
    with st.expander("policy updates: values"):
        wide = curves.pivot_table(index=["step", "policy"], columns="stat", values="value")
        wide = wide.reset_index()[["step", "policy", *_present(wide, mas_data.UPDATE_STATS)]]
        show_table(wide, hide_index=True, key="mas_policy_updates")


def _present(frame: pd.DataFrame, columns: tuple[str, ...]) -> list[str]:
    return [column for column in columns if column in frame.columns]


def _accuracy(frame: pd.DataFrame) -> None:
    curves = mas_data.accuracy_curves(frame)
    if curves.empty:
        return
    y = alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1]))
    color = alt.Color("series:N", legend=legend(1))  # one legend for both layers
    line = alt.Chart(curves).mark_line(point=True).encode(x=STEP_AXIS, y=y, color=color)
    band = (
        alt.Chart(curves.dropna(subset=["ci_low", "ci_high"]))
        .mark_area(opacity=0.2)
        .encode(x=STEP_AXIS, y="ci_low:Q", y2="ci_high:Q", color=color)
    )
    st.altair_chart(sized((band + line).properties(title="accuracy"), 200))
    with st.expander("accuracy: values"):
        show_table(curves, hide_index=True, key="mas_accuracy")


def _role_rewards(records: list[dict[str, Any]]) -> None:
    st.markdown("**Mean reward per role and step** (main lines of the step's problems)")
    summary = mas_data.role_reward_summary(records)
    if summary.empty:
        st.caption("no rewards in the records")
        return
    st.altair_chart(_line_chart(summary, "mean_reward", "role", "mean reward per problem"))
    show_table(summary, hide_index=True, key="mas_role_rewards")


def _transcript_browser(records: list[dict[str, Any]], table: pd.DataFrame) -> None:
    st.markdown("**Transcripts**")
    steps = sorted({int(step) for step in table["step"].dropna()})
    if not steps:
        st.caption("no record carries its step")
        return
    left, right = st.columns([1, 3])
    step = left.selectbox("step", steps, index=len(steps) - 1, key="mas_step")
    rows = table[table["step"] == step]
    labels = {
        int(row.row): f"{row.problem_id} · {'correct' if row.correct else 'wrong'}"
        for row in rows.itertuples()
    }
    picked = right.selectbox(
        "problem", list(labels), format_func=labels.__getitem__, key="mas_problem"
    )
    _transcript(records[picked], step)


def _transcript(record: dict[str, Any], step: int) -> None:
    status = ":green[correct]" if record.get("correct") is True else ":red[wrong]"
    st.markdown(f"#### {record.get('problem_id', '-')} · step {step} · {status}")
    left, right = st.columns(2)
    left.metric("reference", fmt(record.get("reference")))
    right.metric("correct", "yes" if record.get("correct") is True else "no")
    messages = mas_data.workflow_messages(record)
    if messages:
        show_table(mas_data.message_table(messages), hide_index=True, key="mas_messages")
    for message in messages:
        with st.container(border=True):
            head = f"**{message.index}. {message.agent}**"
            if message.round is not None:
                head += f" · round {message.round}"
            head += f" · call {message.call} · reward {fmt(message.reward, 2)}"
            st.markdown(head + f" (`{message.reward_key}`)")
            if message.reasoning:
                with st.expander(f"chain of thought ({len(message.reasoning)} chars)"):
                    st.text(message.reasoning)
            shown = message.text if message.text.strip() else "(empty)"
            st.code(shown, language=None, wrap_lines=True)
    unmatched = mas_data.unmatched_rewards(record, messages)
    if unmatched:
        listed = ", ".join(f"`{key}` {value:g}" for key, value in unmatched.items())
        st.caption(f"rewards with no message of that role and call: {listed}")
    st.markdown("**final answer**")
    transcript = record.get("transcript") if isinstance(record.get("transcript"), dict) else {}
    st.code(str(transcript.get("final_answer") or "-"), language=None, wrap_lines=True)
    rounds = mas_data.workflow_rounds(record)
    if not rounds.empty:
        with st.expander("workflow rounds (transcript extra)"):
            show_table(rounds, hide_index=True, key="mas_rounds")
