"""Failure modes page: MAST rates per category and mode, run against run, and the transcripts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from core.runstore import RECORDS_FILE
from dashboard import cache, data
from dashboard.views.common import (
    ci_text,
    empty_state,
    failure_verdict,
    malformed_note,
    pct,
    percent_bars_with_ci,
    show_table,
    sized,
    transcript,
)
from harness.failures import FAILURES_FILE, compare_failures, summarize_failures
from harness.failures.taxonomy import CATEGORIES, FAILURE_MODES

MAX_SHOWN = 50  # transcripts listed behind one bar


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Failure modes (MAST)")
    analysed = [r for r in runs if r.kind == "eval" and r.has_failures]
    if not analysed:
        empty_state("no failure analysis yet", "failures")
        return
    names = [r.name for r in analysed]
    # The two latest runs, older first: B minus A then reads "after minus before".
    latest = sorted(analysed[:2], key=lambda r: (r.started_at or "", r.name))
    chosen = st.multiselect(
        "runs (A, B)", names, default=[r.name for r in latest], key="failures_runs"
    )
    by_name = {r.name: r for r in analysed}
    selected = [by_name[name] for name in chosen if name in by_name]  # A, B in the order picked
    if not selected:
        st.info("pick at least one run")
        return
    verdicts: dict[str, list[dict]] = {}
    for run in selected:
        loaded = cache.jsonl(root, run.path / FAILURES_FILE)
        malformed_note(loaded.malformed, f"{run.name}/{FAILURES_FILE}")
        verdicts[run.name] = loaded.rows
        summary = summarize_failures(loaded.rows)
        notes = []
        if summary["parse_failures"]:
            notes.append(f"{summary['parse_failures']} judge replies did not parse")
        if summary["errors"]:
            notes.append(f"{summary['errors']} judge calls failed")
        if notes:
            st.caption(f"{run.name}: " + "; ".join(notes) + " (left out of the rates)")

    rates = data.failure_rates(verdicts)
    st.subheader("Per category")
    show_table(
        _pivot(rates[rates["level"].isin(["category", "any"])]),
        hide_index=False,
        key="failures_categories",
    )
    st.subheader("Per mode")
    modes = rates[rates["level"] == "mode"]
    show_table(_pivot(modes), hide_index=False, key="failures_modes")
    _chart(modes)

    if len(selected) == 2:
        _comparison(selected[0].name, selected[1].name, verdicts)

    st.subheader("Transcripts behind a bar")
    targets = {c.key: f"{c.id} {c.name} (category)" for c in CATEGORIES}
    targets.update({m.id: f"{m.id} {m.name}" for m in FAILURE_MODES})
    left, right = st.columns(2)
    target = left.selectbox(
        "mode or category", list(targets), format_func=targets.__getitem__, key="failures_target"
    )
    run_name = right.selectbox("run", [r.name for r in selected], key="failures_run")
    run = next(r for r in selected if r.name == run_name)
    showing = data.verdicts_showing(verdicts[run_name], target)
    st.caption(f"{len(showing)} transcripts of {run_name} show {targets[target]}")
    records, index = cache.record_lookup(root, run.path / RECORDS_FILE)
    for verdict in showing[:MAX_SHOWN]:
        key = data.key_of(verdict)
        quote = (verdict.get("evidence") or {}).get(target, "")
        title = f"{key[0]} / {key[1]} / epoch {key[2]}" + (f' · "{quote[:80]}"' if quote else "")
        with st.expander(title):
            row = index.get(key)
            if row is None:
                st.warning("this sample is not in the run's records.jsonl")
                failure_verdict(verdict)
            else:
                transcript(records[row], verdict)


def _pivot(rates: pd.DataFrame) -> pd.DataFrame:
    """Rows: category or mode; columns per run: rate % and its 95% CI."""
    table = pd.DataFrame({"id": rates["id"], "name": rates["name"]}).drop_duplicates("id")
    table = table.set_index("id")
    for run, rows in rates.groupby("run", sort=False):
        rows = rows.set_index("id")
        judged = rows["n"] > 0
        table[f"{run} %"] = rows["rate"].map(pct).where(judged, None)
        table[f"{run} 95% CI"] = [
            ci_text(lo, hi) if n else "-"
            for lo, hi, n in zip(rows["ci_low"], rows["ci_high"], rows["n"], strict=True)
        ]
        table[f"{run} n"] = rows["n"]
    return table


def _chart(modes: pd.DataFrame) -> None:
    chart = percent_bars_with_ci(
        modes,
        x="id",
        series="run",
        value="rate",
        y_title="% of judged transcripts",
        tooltip=["run", "id", "name", "count", "n", "rate", "ci_low", "ci_high"],
    )
    st.altair_chart(sized(chart, 300))


def _comparison(name_a: str, name_b: str, verdicts: dict[str, list[dict]]) -> None:
    result = compare_failures(verdicts[name_a], verdicts[name_b])
    st.subheader(f"{name_b} minus {name_a}")
    st.caption(
        f"{result['method']} bootstrap 95% CI; n = {result['n_a']} / {result['n_b']}, "
        f"{result['n_shared']} shared"
    )
    rows = [
        {
            "category": row["name"],
            "A %": pct(row["rate_a"]),
            "B %": pct(row["rate_b"]),
            "B - A (points)": round(100 * row["diff"], 1),
            "95% CI": f"[{100 * row['ci95'][0]:+.1f}, {100 * row['ci95'][1]:+.1f}]",
        }
        for row in [*result["categories"].values(), {"name": "any", **result["any_failure"]}]
    ]
    show_table(pd.DataFrame(rows), hide_index=True, key="failures_compare")
