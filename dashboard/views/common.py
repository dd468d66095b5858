"""Pieces shared by the pages: empty states, warnings, formatting, the transcript view."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import data
from dashboard.paths import PathRefused, inside_root
from harness.unscored import NO_SCORE

MAX_OPTIONS = 1000  # rows a picker offers; the table above it shows every row
# What fills each page (shown when it has nothing to show).
HINTS = {
    "runs": "mars eval --suite gsm8k --limit 5",
    "eval": "mars eval --suite gsm8k --limit 5",
    "failures": "mars failures RUNS/<eval run dir>",
    "arena": "mars arena --game tic_tac_toe --opponent mcts:100 --episodes 10",
    "train": "mars train --games tic_tac_toe --steps 10",
    "train_mas": "mars train-mas --workflow reasoner_tool --steps 10",
    "branches": "mars train --games kuhn_poker --estimator at_grpo --steps 10",
    "loop": "mars loop --watch RUNS/<train run> --eval arena:tic_tac_toe:random:20 --once",
    "experiment": "mars experiment marshal-mini --out RUNS/experiments",
}


def empty_state(what: str, hint_key: str) -> None:
    st.info(f"{what}: run `{HINTS[hint_key]}`")


def malformed_note(count: int, where: str) -> None:
    if count:
        st.warning(f"{count} malformed line{'s' if count != 1 else ''} skipped in {where}")


def fmt(value: Any, digits: int = 3) -> str:
    """A cell for display: '-' for missing values."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}f}"
    text = str(value)
    return text if text else "-"


def cell_text(value: Any) -> str:
    """A cell of a column that has gaps, as text: numbers short (6 significant digits)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def display_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: in a column with a missing value (None, NaN) that cell reads "-" and
    the others are text; a complete column keeps its type, so its numbers still sort as numbers.
    (Streamlit itself writes "None" in an empty cell.)"""
    gaps = [i for i in range(frame.shape[1]) if frame.iloc[:, i].isna().any()]
    if not gaps:
        return frame
    shown = frame.copy()
    columns = shown.columns
    shown.columns = pd.RangeIndex(len(columns))
    for i in gaps:
        values = frame.iloc[:, i]
        shown[i] = pd.Series(
            ["-" if gap else cell_text(v) for v, gap in zip(values, values.isna(), strict=True)],
            index=frame.index,
            dtype=object,
        )
    shown.columns = columns
    return shown


def show_table(
    frame: pd.DataFrame, *, key: str | None = None, hide_index: bool = True, **options: Any
) -> None:
    """`st.dataframe` with "-" in empty cells (`display_frame`)."""
    st.dataframe(display_frame(frame), hide_index=hide_index, key=key, **options)


def table_and_pick(
    frame: pd.DataFrame,
    columns: list[str],
    *,
    key: str,
    empty: str,
    label: str,
    option: Callable[[Any], tuple[Hashable, str]],
    counted: str | None = None,
) -> Hashable | None:
    """`frame[columns]` as a table (key `KEY_table`, the question column wide), then a picker
    (`KEY_pick`) of its first MAX_OPTIONS rows, each (row of `itertuples`) offered as
    `option(row)`: (what picking it returns, its text). None, saying `empty`, when the frame is
    empty; with `counted` (what a row is), a cap on the picker is said under the table."""
    show_table(
        frame[columns],
        key=f"{key}_table",
        column_config={"question": st.column_config.TextColumn(width="large")},
    )
    if frame.empty:
        st.info(empty)
        return None
    offered = frame.head(MAX_OPTIONS)
    if counted and len(frame) > MAX_OPTIONS:
        st.caption(f"the picker offers the first {MAX_OPTIONS} of {len(frame)} {counted}")
    labels = dict(option(row) for row in offered.itertuples())
    return st.selectbox(label, list(labels), format_func=labels.__getitem__, key=f"{key}_pick")


def legend(columns: int = 2) -> alt.Legend:
    """A legend under the chart, labels never cut: a long series name (run · game · opponent)
    on the right would squeeze the plot at 1400 px."""
    return alt.Legend(orient="bottom", title=None, labelLimit=0, columns=columns)


def sized(chart: alt.TopLevelMixin, height: int) -> alt.TopLevelMixin:
    """`height` is the plot's own height and the width follows the page: with Streamlit's default
    autosize ("fit") the height would also hold the title, the axes and a legend under the plot,
    which leaves a plot a few pixels high."""
    return chart.properties(
        height=height, autosize=alt.AutoSizeParams(type="fit-x", contains="padding")
    )


def bars_with_ci(
    frame: pd.DataFrame,
    *,
    x: str,
    series: str,
    value: str,
    low: str,
    high: str,
    y_title: str,
    tooltip: Sequence[str],
    domain: tuple[float, float] | None = None,
) -> alt.LayerChart:
    """Grouped bars with their 95% interval: the whisker in grey, a dot in the bar's colour at
    the value and the value written above, so a bar of 0 is still a mark of its series rather
    than a lone whisker."""
    scale = alt.Scale(domain=list(domain)) if domain else alt.Undefined
    base = alt.Chart(frame).encode(
        x=alt.X(f"{x}:N", title=None, axis=alt.Axis(labelAngle=0, labelLimit=0)),
        xOffset=f"{series}:N",
        color=alt.Color(f"{series}:N", legend=legend(1)),
    )
    bars = base.mark_bar().encode(
        y=alt.Y(f"{value}:Q", title=y_title, scale=scale), tooltip=list(tooltip)
    )
    dots = base.mark_point(filled=True, size=60, opacity=1).encode(y=f"{value}:Q")
    whiskers = base.mark_rule(strokeWidth=1.5).encode(
        y=f"{low}:Q", y2=f"{high}:Q", color=alt.value("#555555")
    )
    labels = base.mark_text(dy=-8, fontSize=11).encode(
        y=alt.Y(f"{high}:Q"),
        text=alt.Text(f"{value}:Q", format=".1f"),
        color=alt.value("#333333"),
    )
    return bars + whiskers + dots + labels


def percent_bars_with_ci(
    frame: pd.DataFrame,
    *,
    x: str,
    series: str,
    value: str,
    y_title: str,
    tooltip: Sequence[str],
    domain: tuple[float, float] | None = None,
) -> alt.LayerChart:
    """`bars_with_ci` of a rate in [0, 1] and its interval (`ci_low`, `ci_high`), drawn (and
    shown in the tooltip) as percentages."""
    scaled = frame.assign(
        **{column: 100 * frame[column].astype(float) for column in (value, "ci_low", "ci_high")}
    )
    return bars_with_ci(
        scaled,
        x=x,
        series=series,
        value=value,
        low="ci_low",
        high="ci_high",
        y_title=y_title,
        tooltip=tooltip,
        domain=domain,
    )


def pct(value: Any) -> float | None:
    """A rate as a percentage rounded to 0.1, or None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(100 * float(value), 1)


def score_pct(value: Any) -> float | str:
    """A score as a percentage rounded to 0.1, or "no score" when there is none (never 0)."""
    shown = pct(value)
    return NO_SCORE if shown is None else shown


def round_or_none(value: Any, digits: int = 1) -> float | None:
    """A number rounded for display, or None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        return round(float(value), digits)
    except (TypeError, ValueError):
        return None


def ci_text(low: Any, high: Any) -> str:
    if low is None or high is None:
        return "-"
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        return "-"
    return f"[{100 * low:.1f}, {100 * high:.1f}]"


def pick_run(
    label: str,
    runs: Sequence[data.RunEntry],
    root: Any,
    key: str,
) -> data.RunEntry:
    """A selectbox over runs; `?run=NAME` in the URL preselects one (checked against the root)."""
    names = [r.name for r in runs]
    index = 0
    requested = st.query_params.get("run")
    if requested:
        try:
            wanted = inside_root(root, requested)
        except PathRefused as exc:
            st.error(str(exc))
        else:
            for i, run in enumerate(runs):
                if run.path == wanted:
                    index = i
                    break
            else:
                st.warning(f"no such run here: {requested}")
    chosen = st.selectbox(label, names, index=index, key=key)
    return runs[names.index(chosen)]


def transcript(record: dict[str, Any], verdict: dict[str, Any] | None = None) -> None:
    """One eval sample: question, answer against gold, then every agent message in order."""
    if record.get("error"):
        status = ":red[error]"
    else:
        status = ":green[correct]" if record.get("correct") else ":red[wrong]"
    st.markdown(f"#### {data.fmt_key(record)} · {status}")
    left, middle, right = st.columns(3)
    left.metric("gold", fmt(record.get("gold")))
    middle.metric("extracted", fmt(record.get("extracted")))
    right.metric("extraction failed", "yes" if record.get("extraction_failed") else "no")
    if record.get("error"):
        st.error(f"error: {record['error']}")
    with st.expander("question", expanded=False):
        st.text(str(record.get("question") or "-"))
        for i, choice in enumerate(record.get("choices") or []):
            st.text(f"{chr(65 + i)}) {choice}")
    messages = data.transcript_messages(record)
    if messages:
        show_table(message_table(messages))
    for message in messages:
        with st.container(border=True):
            head = f"**{message.index}. {message.agent}**"
            if message.round is not None:
                head += f" · round {message.round}"
            head += (
                f" · tokens in {fmt(message.prompt_tokens)} / out {fmt(message.completion_tokens)}"
                f" · {fmt(message.latency_s, 2)} s"
            )
            if message.retries:
                head += f" · {message.retries} retries"
            st.markdown(head)
            if message.reasoning:
                with st.expander(f"chain of thought ({len(message.reasoning)} chars)"):
                    st.text(message.reasoning)
            st.markdown(message.text or "_(empty)_")
    st.markdown("**final answer handed in**")
    st.code(str(record.get("final_answer") or "-"), language=None)
    if verdict is not None:
        failure_verdict(verdict)


def message_table(messages: Sequence[data.MessageView]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "#": m.index,
                "agent": m.agent,
                "round": m.round,
                "prompt_tokens": m.prompt_tokens,
                "completion_tokens": m.completion_tokens,
                "reasoning_chars": len(m.reasoning),
                "latency_s": m.latency_s,
                "finish": m.finish_reason,
            }
            for m in messages
        ]
    )


def failure_verdict(verdict: dict[str, Any]) -> None:
    from harness.failures.taxonomy import MODES_BY_ID

    st.markdown("**MAST verdict**")
    if verdict.get("error"):
        st.warning(f"judge call failed: {verdict['error']}")
        return
    if not verdict.get("parsed"):
        st.warning(f"judge reply did not parse ({verdict.get('parse_error') or '-'})")
        return
    modes = verdict.get("modes") or []
    if not modes:
        st.caption("no failure mode named")
    for mode_id in modes:
        mode = MODES_BY_ID.get(mode_id)
        quote = (verdict.get("evidence") or {}).get(mode_id)
        line = f"- **{mode_id}** {mode.name if mode else ''}"
        if quote:
            line += f': "{quote}"'
        st.markdown(line)
    if verdict.get("summary"):
        st.caption(verdict["summary"])
