"""Samples page: filter an eval run's records and read one transcript message by message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from core.runstore import RECORDS_FILE
from dashboard import cache, data
from dashboard.views.common import empty_state, malformed_note, pick_run, table_and_pick, transcript
from harness.failures import FAILURES_FILE

# Headers short enough for the matching samples' columns to fit 1400 px.
LABELS = {"extraction_failed": "unreadable", "llm_calls": "calls", "latency_s": "s"}


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Samples")
    eval_runs = [r for r in runs if r.kind == "eval"]
    if not eval_runs:
        empty_state("no eval runs yet", "eval")
        return
    run = pick_run("eval run", eval_runs, root, key="samples_run")
    records_path = run.path / RECORDS_FILE
    loaded, frame = cache.eval_data(root, records_path)
    malformed_note(loaded.malformed, f"{run.name}/{RECORDS_FILE}")
    if frame.empty:
        empty_state(f"{run.name} has no records yet", "eval")
        return

    suites = sorted(frame["suite"].unique())
    left, middle, right = st.columns(3)
    chosen_suites = left.multiselect("suite", suites, default=[], key="samples_suites")
    correctness = middle.selectbox("graded", data.CORRECTNESS, key="samples_correct")
    extraction = right.selectbox(
        "extraction failed", data.TRI_STATE, key="samples_extraction", help="only / none / all"
    )
    left, right = st.columns([1, 2])
    errors = left.selectbox("errored", data.TRI_STATE, key="samples_errors")
    text = right.text_input("search the question, answers and messages", key="samples_text")
    matches = data.filter_samples(
        frame,
        suites=chosen_suites,
        correctness=correctness,
        extraction=extraction,
        errors=errors,
        text=text,
    )
    graded = matches[~matches["has_error"]]
    counts = st.columns(3)
    counts[0].metric("matching samples", len(matches))
    counts[1].metric(
        "accuracy of matches",
        f"{100 * graded['correct'].mean():.1f}%" if len(graded) else "-",
    )
    counts[2].metric("errored", int(matches["has_error"].sum()))
    columns = ["suite", "sample_id", "epoch", "question", "correct", "extracted", "gold"]
    columns += ["extraction_failed", "error", "llm_calls", "tokens", "latency_s"]
    if frame["epoch"].nunique() <= 1:
        columns.remove("epoch")  # one epoch: room for the rest
    picked = table_and_pick(
        matches,
        columns,
        key="samples",
        empty="no sample matches these filters",
        label="sample",
        option=_sample_option,
        counted="matches",
        labels=LABELS,
    )
    if picked is None:
        return
    record = loaded.rows[int(picked)]
    verdict = None
    if run.has_failures:
        verdicts = cache.jsonl(root, run.path / FAILURES_FILE).rows
        key = data.key_of(record)
        verdict = next((v for v in verdicts if data.key_of(v) == key), None)
    transcript(record, verdict)


def _sample_option(row: Any) -> tuple[int, str]:
    outcome = "error" if row.has_error else "correct" if row.correct else "wrong"
    return int(row.row), f"{row.suite} / {row.sample_id} / epoch {row.epoch} · {outcome}"
