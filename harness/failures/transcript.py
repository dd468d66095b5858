"""What the judge reads: which records are analysed, and each transcript rendered and clipped
to fit the judge's context (see the package's docstring for the truncation rules)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.failures.taxonomy import (
    taxonomy_text,
)

if TYPE_CHECKING:  # the dashboard reads verdicts without loading the endpoint layer (openai)
    from core.endpoint import Message

Key = tuple[str, str, int]  # (suite, sample id, epoch)


def record_key(record: dict[str, Any]) -> Key:
    return (str(record["suite"]), str(record["sample_id"]), int(record["epoch"]))


def select_records(records: Iterable[dict[str, Any]], *, include_all: bool) -> list[dict[str, Any]]:
    """The records to judge: failed ones (wrong, not errored) unless `include_all`.

    Records without a transcript (an errored sample, another kind of run) are never selected.
    """
    chosen: list[dict[str, Any]] = []
    for record in records:
        messages = (record.get("transcript") or {}).get("messages")
        if not messages or not all(k in record for k in ("suite", "sample_id", "epoch")):
            continue
        if include_all or (not record.get("correct") and not record.get("error")):
            chosen.append(record)
    return chosen


@dataclass(frozen=True)
class TruncationLimits:
    question_chars: int = 3000
    reasoning_chars: int = 1200
    message_chars: int = 2000
    transcript_chars: int = 16000


def clip(text: str, limit: int) -> tuple[str, bool]:
    """Keep the first 2/3 and the last 1/3 of `limit` characters, marking the cut."""
    if limit <= 0 or len(text) <= limit:
        return text, False
    head = (2 * limit) // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :]}", True


def _render_message(
    index: int, message: dict[str, Any], limits: TruncationLimits
) -> tuple[str, bool]:
    agent = message.get("agent") or message.get("role") or "agent"
    header = f"[{index}] {agent}"
    if message.get("round") is not None:
        header += f" (round {message['round']})"
    reasoning, cut_r = clip(str(message.get("reasoning") or "").strip(), limits.reasoning_chars)
    text, cut_t = clip(str(message.get("text") or "").strip(), limits.message_chars)
    parts = [header + ":"]
    if reasoning:
        parts.append(f"<reasoning>\n{reasoning}\n</reasoning>")
    parts.append(text or "(empty message)")
    return "\n".join(parts), cut_r or cut_t


def render_transcript(
    messages: Sequence[dict[str, Any]], limits: TruncationLimits
) -> tuple[str, bool]:
    """The conversation as the judge reads it, and whether anything was cut."""
    rendered = [_render_message(i, m, limits) for i, m in enumerate(messages, start=1)]
    truncated = any(cut for _, cut in rendered)
    blocks = [text for text, _ in rendered]
    separator = "\n\n"
    total = sum(len(b) for b in blocks) + len(separator) * max(0, len(blocks) - 1)
    if total <= limits.transcript_chars:
        return separator.join(blocks), truncated
    # Keep messages alternately from the start and the end until the budget is spent.
    keep_front: list[int] = []
    keep_back: list[int] = []
    used = 0
    left, right = 0, len(blocks) - 1
    take_front = True
    while left <= right:
        index = left if take_front else right
        cost = len(blocks[index]) + len(separator)
        if used + cost > limits.transcript_chars and (keep_front or keep_back):
            break
        used += cost
        if take_front:
            keep_front.append(index)
            left += 1
        else:
            keep_back.append(index)
            right -= 1
        take_front = not take_front
    omitted = len(blocks) - len(keep_front) - len(keep_back)
    kept = [blocks[i] for i in keep_front]
    if omitted:
        kept.append(f"[... {omitted} messages omitted ...]")
    kept += [blocks[i] for i in reversed(keep_back)]
    return separator.join(kept), True


_SYSTEM_PROMPT = """You annotate failures of multi-agent LLM systems. You read one transcript of \
agents working together on a question and decide which failure modes of the MAST taxonomy \
(Multi-Agent System failure Taxonomy) it shows.

{taxonomy}
Rules:
- Mark a mode only when the transcript shows it; quote the words that show it.
- A transcript can show several modes, or none.
- Reply with one JSON object and nothing else, in this form:
{{"failure_modes": [{{"id": "FM-2.5", "evidence": "a short quote from the transcript"}}], \
"summary": "one sentence on what went wrong"}}
Use "failure_modes": [] when no mode applies. Keep each quote under 30 words."""


def failure_judge_messages(
    record: dict[str, Any], limits: TruncationLimits
) -> tuple[list[Message], bool]:
    """The chat sent to the judge for one record, and whether the transcript was truncated."""
    transcript = record.get("transcript") or {}
    conversation, truncated = render_transcript(transcript.get("messages") or [], limits)
    question, cut_q = clip(str(record.get("question") or "").strip(), limits.question_chars)
    choices = record.get("choices")
    lines = [f"Suite: {record.get('suite', '-')}", "", "Question:", question]
    if choices:
        letters = "ABCDEFGHIJ"
        lines += [f"{letters[i]}) {c}" for i, c in enumerate(choices[: len(letters)])]
    lines += [
        "",
        f"Gold answer: {record.get('gold', '-')}",
        f"Final answer handed in: {clip(str(record.get('final_answer') or ''), 500)[0] or '-'}",
        f"Extracted answer: {_or_dash(record.get('extracted'))}",
        f"Graded correct: {bool(record.get('correct'))}",
        "",
        f"Transcript ({len(transcript.get('messages') or [])} messages):",
        conversation,
        "",
        "Which MAST failure modes does this transcript show? Reply with the JSON object only.",
    ]
    system = _SYSTEM_PROMPT.format(taxonomy=taxonomy_text())
    return (
        [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}],
        truncated or cut_q,
    )


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)
