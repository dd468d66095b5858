"""Compare page: two eval runs sample by sample (where they disagree, McNemar's test, both
transcripts side by side), their calls and tokens per role beside accuracy, and accuracy
against tokens across eval runs."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from core.runstore import RECORDS_FILE
from dashboard import cache, data, defaults
from dashboard.paths import inside_root
from dashboard.views.common import (
    SHAPES,
    ci_text,
    empty_state,
    legend,
    malformed_note,
    score_pct,
    show_table,
    sized,
    table_and_pick,
    transcript,
)

DISAGREE = "disagreements"
SHOW = (DISAGREE, *data.OUTCOMES, "all")
COST_RUNS = 8  # eval runs in the accuracy-against-tokens view by default (the newest)
# The accuracy-against-tokens marks' areas (px^2): the first run's largest, each next smaller.
MARK_AREA, MARK_STEP, MARK_AREA_MIN = 320, 70, 60
# The pairs as listed: A's and B's answer, tokens and calls side by side in one column each
# ("A / B"), so that every column fits 1400 px beside the wrapped question.
PAIR_SHOWN = ["suite", "sample_id", "epoch", "question", "gold", "A", "B", "answers A / B"]
PAIR_SHOWN += ["tokens A / B", "calls A / B"]
# The per-role table's headers ("/ q": per question, said under it).
ROLE_LABELS = {
    "calls / question": "calls / q",
    "prompt tokens / question": "prompt / q",
    "completion tokens / question": "completion / q",
    "reasoning tokens / question": "reasoning / q",
    "tokens / question": "tokens / q",
}


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Compare eval runs")
    eval_runs = [r for r in runs if r.kind == "eval"]
    if not eval_runs:
        empty_state("no eval runs yet", "eval")
        return
    names = [r.name for r in eval_runs]
    by_name = {r.name: r for r in eval_runs}
    left, right = st.columns(2)
    # By default the newest run is B and the one before it A, so B minus A reads after - before.
    a_name = left.selectbox(
        "run A", names, index=_index(root, names, "a", min(1, len(names) - 1)), key="compare_a"
    )
    b_name = right.selectbox("run B", names, index=_index(root, names, "b", 0), key="compare_b")
    run_a, run_b = by_name[a_name], by_name[b_name]
    loaded_a, frame_a = cache.eval_data(root, run_a.path / RECORDS_FILE)
    loaded_b, frame_b = cache.eval_data(root, run_b.path / RECORDS_FILE)
    malformed_note(loaded_a.malformed, f"{a_name}/{RECORDS_FILE}")
    if b_name != a_name:
        malformed_note(loaded_b.malformed, f"{b_name}/{RECORDS_FILE}")
    if a_name == b_name:
        st.info("pick two different runs to compare them sample by sample")
    else:
        _samples(frame_a, frame_b, loaded_a.rows, loaded_b.rows, a_name, b_name)
    _costs(root, {a_name: (run_a, frame_a), b_name: (run_b, frame_b)})
    _accuracy_against_tokens(root, eval_runs)


def _index(root: Path, names: list[str], param: str, default: int) -> int:
    """The position of the run named by `?a=` / `?b=` in the URL (checked against the root)."""
    paths = [inside_root(root, name) for name in names]
    index = defaults.requested_index(root, paths, param, what="eval run")
    return default if index is None else index


def _samples(
    frame_a: pd.DataFrame,
    frame_b: pd.DataFrame,
    rows_a: list[dict],
    rows_b: list[dict],
    a_name: str,
    b_name: str,
) -> None:
    st.subheader("Sample by sample")
    pairs = data.pair_samples(frame_a, frame_b)
    counts = data.paired_counts(pairs, frame_a, frame_b)
    if pairs.empty:
        st.info(f"{a_name} and {b_name} share no (suite, sample id, epoch)")
        return
    figures = st.columns(6)
    figures[0].metric("paired samples", counts.paired)
    figures[1].metric("A right, B wrong", counts.a_only)
    figures[2].metric("B right, A wrong", counts.b_only)
    figures[3].metric("both right", counts.both_right)
    figures[4].metric("both wrong", counts.both_wrong)
    figures[5].metric("McNemar p", f"{counts.p_value:.3g}")
    notes = [
        f"McNemar's exact test (two-sided binomial on the {counts.a_only + counts.b_only} "
        "discordant pairs): the chance of a split at least this uneven if A and B were as good"
    ]
    if counts.not_graded:
        notes.append(f"{counts.not_graded} pairs with an error in either run are left out")
    if counts.only_in_a or counts.only_in_b:
        notes.append(f"{counts.only_in_a} samples only in A, {counts.only_in_b} only in B")
    st.caption("; ".join(notes) + ".")

    # With no disagreement, every pair is shown, so both transcripts still open without a click.
    default = 0 if counts.a_only + counts.b_only else SHOW.index("all")
    show = st.selectbox("show", SHOW, index=default, key="compare_show")
    if show == DISAGREE:
        shown = pairs[pairs["outcome"].isin([data.OUTCOMES[0], data.OUTCOMES[1]])]
    elif show == "all":
        shown = pairs
    else:
        shown = pairs[pairs["outcome"] == show]
    columns = [c for c in PAIR_SHOWN if c != "epoch" or pairs["epoch"].nunique() > 1]
    picked = table_and_pick(
        side_by_side(shown),
        columns,
        key="compare",
        empty="no pair here",
        label="both transcripts of",
        option=lambda row: (
            row.Index,
            f"{row.suite} / {row.sample_id} / epoch {row.epoch} · A {row.A}, B {row.B}",
        ),
    )
    if picked is None:
        return
    row = pairs.loc[picked]
    left, right = st.columns(2)
    with left:
        st.markdown(f"**A: `{a_name}`**")
        transcript(rows_a[int(row["a_row"])])
    with right:
        st.markdown(f"**B: `{b_name}`**")
        transcript(rows_b[int(row["b_row"])])


def _costs(root: Path, chosen: dict[str, tuple[data.RunEntry, pd.DataFrame]]) -> None:
    st.subheader("Calls and tokens beside accuracy")
    usages = {name: cache.usage(root, run.path) for name, (run, _) in chosen.items()}
    rows = [
        data.cost_row(run=name, mas=run.mas, model=run.model_label, frame=frame, usage=usages[name])
        for name, (run, frame) in chosen.items()
    ]
    show_table(_cost_table(pd.DataFrame(rows)), key="compare_costs")
    questions = {name: len(frame) for name, (_, frame) in chosen.items()}
    roles = data.role_table(usages, questions)
    if roles.empty:
        st.caption("no usage.json in these runs: calls and tokens are not known")
        return
    digits = {c: 2 if c.startswith("calls") else 1 for c in roles.columns if "/ question" in c}
    formats = {c: f"%.{d}f" for c, d in digits.items()}
    show_table(roles.round(digits), key="compare_roles", labels=ROLE_LABELS, formats=formats)
    st.caption(
        "From each run's usage.json (all its attempts added up); / q: per question, divided by "
        "the run's records (one per sample and epoch)."
    )


def side_by_side(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs with A's and B's extracted answer, tokens and calls as one text column each,
    "A / B" ("-" for a missing one)."""

    def both(a: str, b: str) -> list[str]:
        return [f"{_short(x)} / {_short(y)}" for x, y in zip(pairs[a], pairs[b], strict=True)]

    return pairs.assign(
        **{
            "answers A / B": both("A extracted", "B extracted"),
            "tokens A / B": both("A tokens", "B tokens"),
            "calls A / B": both("A calls", "B calls"),
        }
    )


def _short(value: object) -> str:
    """A cell of an "A / B" column: a whole number without decimals, "-" for none."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cost_table(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": table["run"],
            "mas": table["mas"],
            "model": table["model"],
            "graded": table["graded"],
            "accuracy %": table["accuracy"].map(score_pct),
            "95% CI": [
                ci_text(lo, hi) for lo, hi in zip(table["ci_low"], table["ci_high"], strict=True)
            ],
            "calls / question": pd.to_numeric(table["calls / question"]).round(2),
            "tokens / question": pd.to_numeric(table["tokens / question"]).round(1),
        }
    )


def _accuracy_against_tokens(root: Path, eval_runs: list[data.RunEntry]) -> None:
    st.subheader("Accuracy against tokens per question, eval runs")
    names = [r.name for r in eval_runs]
    chosen = st.multiselect("eval runs", names, default=names[:COST_RUNS], key="compare_cost_runs")
    rows = []
    for run in eval_runs:
        if run.name not in chosen:
            continue
        _, frame = cache.eval_data(root, run.path / RECORDS_FILE)
        usage = cache.usage(root, run.path)
        rows.append(
            data.cost_row(
                run=run.name, mas=run.mas, model=run.model_label, frame=frame, usage=usage
            )
        )
    if not rows:
        return
    table = pd.DataFrame(rows)
    show_table(_cost_table(table), key="compare_cost_table")
    plotted = table.dropna(subset=["accuracy", "tokens / question"])
    if len(plotted) < len(table):
        st.caption("a run without usage.json or without a graded sample is not plotted")
    if plotted.empty:
        return
    st.altair_chart(accuracy_tokens_chart(plotted))


def accuracy_tokens_chart(table: pd.DataFrame) -> alt.LayerChart:
    """One point per run: pooled accuracy (with its 95% interval) against tokens per question.
    Two runs can land on one point (the same MAS and model on the same questions): each run is
    a hollow mark of its own shape and colour, the first the largest, so the ones drawn over it
    sit inside it and none hides another."""
    points = pd.DataFrame(
        {
            "run": table["run"] + " · " + table["mas"] + " · " + table["model"],
            "tokens": table["tokens / question"].astype(float),
            "accuracy": 100 * table["accuracy"].astype(float),
            "ci_low": 100 * table["ci_low"].astype(float),
            "ci_high": 100 * table["ci_high"].astype(float),
            "calls": table["calls / question"].astype(float),
            "size": [max(MARK_AREA - MARK_STEP * i, MARK_AREA_MIN) for i in range(len(table))],
        }
    )
    base = alt.Chart(points).encode(
        x=alt.X("tokens:Q", title="tokens per question (prompt + completion)"),
        color=alt.Color("run:N", legend=legend(1), sort=None),
    )
    dots = base.mark_point(filled=False, strokeWidth=2, opacity=1).encode(
        y=alt.Y("accuracy:Q", title="accuracy %", scale=alt.Scale(domain=[0, 100])),
        shape=alt.Shape("run:N", legend=legend(1), sort=None, scale=alt.Scale(range=SHAPES)),
        size=alt.Size("size:Q", scale=None, legend=None),
        tooltip=["run", "tokens", "calls", "accuracy", "ci_low", "ci_high"],
    )
    bars = base.mark_rule(strokeWidth=2).encode(y="ci_low:Q", y2="ci_high:Q")
    return sized(bars + dots, 340)
