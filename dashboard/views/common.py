"""Pieces shared by the pages: empty states, warnings, formatting, the transcript view."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import data, defaults
from harness.unscored import NO_SCORE

MAX_OPTIONS = 1000  # rows a picker offers; the table above it shows every row
# The series colours of every chart: each at least 3:1 against the white page (WCAG's least for
# graphics) and apart from the others; Streamlit's own palette has a light blue, pink, green
# and yellow that a legend swatch or a thin line all but loses.
PALETTE = [
    "#1f77b4",  # blue
    "#d62728",  # red
    "#2ca02c",  # green
    "#e6550d",  # orange
    "#9467bd",  # purple
    "#8c564b",  # brown
    "#c51b7d",  # magenta
    "#0e7c86",  # teal
    "#7f7f7f",  # grey
    "#7a7a00",  # olive
]
# Point shapes, one per series where points of several series can meet (Vega's names).
SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down", "wedge"]
# A row this tall (px) lets a text column wrap (Streamlit wraps only above 4rem): three lines.
WRAP_ROW_PX = 68
QUESTION_PX = 220  # a question's column: wrapped over three lines, the numbers beside it in view
ERROR_PX = 140  # an error's column, wrapped
SIGNIFICANT = 3  # digits a table shows of each number (`number_format`)
MAX_DECIMALS = 6
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


def cell_text(value: Any, number: str | None = None) -> str:
    """A cell of a column that has gaps, as text: a number in the column's printf `number`
    format, else short (6 significant digits)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and number:
        return number % value
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def number_format(values: pd.Series) -> str | None:
    """The printf format that shows a numeric column to its precision: as many decimals as its
    numbers need to show SIGNIFICANT digits each (at most MAX_DECIMALS), so a KL of 0.0004 is
    not a row of zeros, a reward of 0.05 beside one of -11 stays 0.05 and a token count carries
    no decimals. None for a column of anything else."""
    numbers = pd.to_numeric(values, errors="coerce")
    if values.dtype == bool or numbers.notna().sum() != values.notna().sum():
        return None
    finite = numbers[numbers.notna() & numbers.map(math.isfinite)]
    return f"%.{max((_decimals(float(v)) for v in finite), default=0)}f"


def _decimals(value: float) -> int:
    """Decimals that show `value` to SIGNIFICANT digits (trailing zeros dropped)."""
    text = f"{abs(value):.{SIGNIFICANT}g}"
    if "e-" in text:
        return MAX_DECIMALS
    if "e" in text or "." not in text:
        return 0
    return min(len(text.split(".")[1]), MAX_DECIMALS)


def display_frame(frame: pd.DataFrame, formats: dict[str, str] | None = None) -> pd.DataFrame:
    """The table as shown: in a column with a missing value (None, NaN) that cell reads "-" and
    the others are text (numbers in the column's `formats` entry); a complete column keeps its
    type, so its numbers still sort as numbers. (Streamlit itself writes "None" in an empty
    cell.)"""
    gaps = [i for i in range(frame.shape[1]) if frame.iloc[:, i].isna().any()]
    if not gaps:
        return frame
    formats = formats or {}
    shown = frame.copy()
    columns = shown.columns
    shown.columns = pd.RangeIndex(len(columns))
    for i in gaps:
        values = frame.iloc[:, i]
        number = formats.get(str(columns[i]))
        shown[i] = pd.Series(
            [
                "-" if gap else cell_text(v, number)
                for v, gap in zip(values, values.isna(), strict=True)
            ],
            index=frame.index,
            dtype=object,
        )
    shown.columns = columns
    return shown


def table_config(
    frame: pd.DataFrame,
    *,
    labels: dict[str, str] | None = None,
    formats: dict[str, str] | None = None,
    widths: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A column config per column: its header (`labels`, shorter than a long column name), its
    width, and each complete numeric column's number format (`formats`, else `number_format`).
    The frame's own column names stay as they are."""
    labels, formats, widths = labels or {}, formats or {}, widths or {}
    config: dict[str, Any] = {}
    for column in frame.columns:
        name = str(column)
        label, width = labels.get(name), widths.get(name)
        values = frame[column]
        number = formats.get(name) or number_format(values)
        if number and values.notna().all() and pd.api.types.is_numeric_dtype(values):
            config[name] = st.column_config.NumberColumn(label, width=width, format=number)
        elif label or width:
            config[name] = st.column_config.Column(label, width=width)
    return config


def show_table(
    frame: pd.DataFrame,
    *,
    key: str | None = None,
    hide_index: bool = True,
    labels: dict[str, str] | None = None,
    formats: dict[str, str] | None = None,
    widths: dict[str, Any] | None = None,
    **options: Any,
) -> None:
    """`st.dataframe` with "-" in empty cells (`display_frame`; a column with gaps is text, its
    numbers in their `formats` entry), complete numeric columns to their precision and the
    headers of `labels` (`table_config`); a `column_config` in `options` wins column by
    column."""
    config = table_config(frame, labels=labels, formats=formats, widths=widths)
    config.update(options.pop("column_config", None) or {})
    shown = display_frame(frame, formats)
    st.dataframe(shown, hide_index=hide_index, key=key, column_config=config, **options)


def table_and_pick(
    frame: pd.DataFrame,
    columns: list[str],
    *,
    key: str,
    empty: str,
    label: str,
    option: Callable[[Any], tuple[Hashable, str]],
    counted: str | None = None,
    labels: dict[str, str] | None = None,
) -> Hashable | None:
    """`frame[columns]` as a table (key `KEY_table`, the question wrapped in a column of
    QUESTION_PX, headers as `labels` says), then a picker (`KEY_pick`) of its first MAX_OPTIONS
    rows, each (row of `itertuples`) offered as `option(row)`: (what picking it returns, its
    text). None, saying `empty`, when the frame is empty; with `counted` (what a row is), a cap
    on the picker is said under the table."""
    show_table(
        frame[columns],
        key=f"{key}_table",
        labels=labels,
        widths={"question": QUESTION_PX, "error": ERROR_PX},
        row_height=WRAP_ROW_PX,
    )
    if frame.empty:
        st.info(empty)
        return None
    offered = frame.head(MAX_OPTIONS)
    if counted and len(frame) > MAX_OPTIONS:
        st.caption(f"the picker offers the first {MAX_OPTIONS} of {len(frame)} {counted}")
    labels_of = dict(option(row) for row in offered.itertuples())
    return st.selectbox(
        label, list(labels_of), format_func=labels_of.__getitem__, key=f"{key}_pick"
    )


def legend(columns: int = 2) -> alt.Legend:
    """A legend under the chart, labels never cut: a long series name (run · game · opponent)
    on the right would squeeze the plot at 1400 px. Its symbols are opaque, also where a
    faint 95% band is the chart's first layer (the legend would take the band's opacity)."""
    return alt.Legend(orient="bottom", title=None, labelLimit=0, columns=columns, symbolOpacity=1)


def sized(chart: alt.TopLevelMixin, height: int) -> alt.TopLevelMixin:
    """`height` is the plot's own height and the width follows the page: with Streamlit's default
    autosize ("fit") the height would also hold the title, the axes and a legend under the plot,
    which leaves a plot a few pixels high. Its series take their colours from PALETTE."""
    return chart.properties(
        height=height, autosize=alt.AutoSizeParams(type="fit-x", contains="padding")
    ).configure_range(category=PALETTE)


def step_x(field: str = "x", title: str = "step", scale: alt.Scale | None = None) -> alt.X:
    """The step axis of a chart over steps: numeric, ticks on whole steps only; `scale` spans
    the same steps in every chart of a page."""
    return alt.X(
        f"{field}:Q",
        title=title,
        axis=alt.Axis(format="d", tickMinStep=1),
        scale=scale if scale is not None else alt.Undefined,
    )


def numeric(values: pd.Series) -> pd.Series | None:
    """The values as numbers, or None when one of them is not a number (a checkpoint's path).
    Tables concatenated with an empty one come back as objects with numbers inside: this makes
    their steps numbers again."""
    numbers = pd.to_numeric(values, errors="coerce")
    return None if numbers.isna().sum() > values.isna().sum() else numbers


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
    index = defaults.requested_index(root, [run.path for run in runs]) or 0
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
        show_table(message_table(messages), labels=MESSAGE_LABELS)
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
    st.code(str(record.get("final_answer") or "-"), language=None, wrap_lines=True)
    if verdict is not None:
        failure_verdict(verdict)


# Headers short enough for two transcripts side by side (Compare's columns are 460 px at 1400).
MESSAGE_LABELS = {
    "prompt_tokens": "in",
    "completion_tokens": "out",
    "reasoning_chars": "CoT",
    "latency_s": "s",
}


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
