"""Eval records as tables: per-sample rows, accuracy with its interval, filters, transcripts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.stats import clustered_wilson_ci
from dashboard.data.values import as_float, as_int, as_text


def _message_tokens(message: dict[str, Any]) -> tuple[int, int]:
    usage = message.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _record_tokens(record: dict[str, Any], messages: list[dict[str, Any]]) -> int:
    per_agent = (record.get("metrics") or {}).get("tokens_per_agent")
    if isinstance(per_agent, dict) and per_agent:
        return sum(
            int(v.get("prompt_tokens") or 0) + int(v.get("completion_tokens") or 0)
            for v in per_agent.values()
            if isinstance(v, dict)
        )
    return sum(sum(_message_tokens(m)) for m in messages)


EVAL_COLUMNS = [
    "suite",
    "sample_id",
    "epoch",
    "correct",
    "extraction_failed",
    "has_error",
    "error",
    "extracted",
    "gold",
    "llm_calls",
    "tokens",
    "latency_s",
    "question",
    "row",
    "search",
]


def eval_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per eval record with the fields the tables filter on; `row` indexes `records`.

    `search` is the lowercased question, final answer and every message's text and reasoning.
    """
    rows: list[tuple[Any, ...]] = []
    for index, record in enumerate(records):
        transcript = record.get("transcript") if isinstance(record.get("transcript"), dict) else {}
        messages = [m for m in (transcript.get("messages") or []) if isinstance(m, dict)]
        pieces = [str(record.get("question") or ""), str(record.get("final_answer") or "")]
        for message in messages:
            pieces.append(str(message.get("text") or ""))
            pieces.append(str(message.get("reasoning") or ""))
        error = record.get("error")
        rows.append(
            (
                str(record.get("suite") or "-"),
                str(record.get("sample_id", "-")),
                as_int(record.get("epoch"), 0),
                bool(record.get("correct")),
                bool(record.get("extraction_failed")),
                bool(error),
                str(error) if error else None,
                as_text(record.get("extracted")),
                as_text(record.get("gold")),
                int((record.get("metrics") or {}).get("llm_calls") or len(messages)),
                _record_tokens(record, messages),
                as_float(record.get("latency_s")),
                as_text(record.get("question")),
                index,
                "\n".join(pieces).lower(),
            )
        )
    return pd.DataFrame.from_records(rows, columns=EVAL_COLUMNS)


def accuracy_rows(frame: pd.DataFrame, *, run: str, mas: str, model: str) -> list[dict[str, Any]]:
    """Per suite of one run: accuracy over graded attempts with its 95% interval (Wilson, clustered
    by question when questions have several epochs: `core.stats.clustered_wilson_ci`).

    Errored attempts are counted apart and not scored as wrong, as in `mars eval`'s summary; a
    suite without a graded attempt has no score (accuracy and interval None, never 0).
    """
    out: list[dict[str, Any]] = []
    if frame.empty:
        return out
    for suite, rows in frame.groupby("suite", sort=True):
        graded = rows[~rows["has_error"]]
        n = len(graded)
        correct = int(graded["correct"].sum())
        per_question = graded.groupby("sample_id")["correct"].agg(["sum", "count"])
        interval = clustered_wilson_ci(
            per_question["sum"].astype(int).tolist(), per_question["count"].astype(int).tolist()
        )
        out.append(
            {
                "suite": suite,
                "mas": mas,
                "model": model,
                "run": run,
                "n": n,
                "correct": correct,
                "accuracy": correct / n if n else None,
                "ci_low": interval.low if interval else None,
                "ci_high": interval.high if interval else None,
                "errors": int(rows["has_error"].sum()),
                "extraction_failures": int(graded["extraction_failed"].sum()),
            }
        )
    return out


def accuracy_table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    columns = ["suite", "mas", "model", "run", "n", "correct", "accuracy", "ci_low", "ci_high"]
    columns += ["errors", "extraction_failures"]
    table = pd.DataFrame(list(rows), columns=columns)
    return table.sort_values(["suite", "mas", "model", "run"], kind="stable").reset_index(drop=True)


CORRECTNESS = ("all", "correct", "wrong")
TRI_STATE = ("all", "only", "none")


def filter_samples(
    frame: pd.DataFrame,
    *,
    suites: Sequence[str] = (),
    correctness: str = "all",
    extraction: str = "all",
    errors: str = "all",
    text: str = "",
) -> pd.DataFrame:
    """The eval rows matching every filter; `text` is a case-insensitive substring search."""
    mask = pd.Series(True, index=frame.index)
    if suites:
        mask &= frame["suite"].isin(list(suites))
    if correctness == "correct":
        mask &= frame["correct"] & ~frame["has_error"]
    elif correctness == "wrong":
        mask &= ~frame["correct"] & ~frame["has_error"]
    for column, choice in (("extraction_failed", extraction), ("has_error", errors)):
        if choice == "only":
            mask &= frame[column]
        elif choice == "none":
            mask &= ~frame[column]
    needle = text.strip().lower()
    if needle:
        mask &= frame["search"].str.contains(needle, regex=False)
    return frame[mask]


@dataclass
class MessageView:
    index: int
    agent: str
    round: int | None
    reasoning: str
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    latency_s: float | None
    finish_reason: str | None
    retries: int


def transcript_messages(record: dict[str, Any]) -> list[MessageView]:
    transcript = record.get("transcript") if isinstance(record.get("transcript"), dict) else {}
    views: list[MessageView] = []
    for index, message in enumerate(transcript.get("messages") or [], start=1):
        if not isinstance(message, dict):
            continue
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
        views.append(
            MessageView(
                index=index,
                agent=str(message.get("agent") or message.get("role") or "-"),
                round=message.get("round") if isinstance(message.get("round"), int) else None,
                reasoning=str(message.get("reasoning") or ""),
                text=str(message.get("text") or ""),
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                reasoning_tokens=usage.get("reasoning_tokens"),
                latency_s=as_float(message.get("latency_s")),
                finish_reason=message.get("finish_reason"),
                retries=as_int(message.get("retries"), 0),
            )
        )
    return views


def key_of(record: dict[str, Any]) -> tuple[str, str, int]:
    return (str(record.get("suite")), str(record.get("sample_id")), as_int(record.get("epoch"), 0))


def fmt_key(record: dict[str, Any]) -> str:
    suite, sample_id, epoch = key_of(record)
    return f"{suite} / {sample_id} / epoch {epoch}"
