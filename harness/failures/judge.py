"""Judging: one model call per selected transcript, each turned into a verdict record."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import EndpointError
from harness.failures.store import SCHEMA_VERSION
from harness.failures.taxonomy import (
    MODES_BY_ID,
)
from harness.failures.transcript import TruncationLimits, clip, failure_judge_messages, record_key
from harness.failures.verdict import parse_failure_verdict

if TYPE_CHECKING:  # the dashboard reads verdicts without loading the endpoint layer (openai)
    from core.endpoint import Completion, Endpoint, GenerationConfig

_RAW_REPLY_CHARS = 4000


def _judge_generation() -> GenerationConfig:
    from core.endpoint import GenerationConfig

    return GenerationConfig(temperature=0.0, max_tokens=1024)


@dataclass(frozen=True)
class FailureJudgeSettings:
    model: str
    limits: TruncationLimits = field(default_factory=TruncationLimits)
    gen: GenerationConfig = field(default_factory=_judge_generation)


def verdict_record(
    record: dict[str, Any],
    settings: FailureJudgeSettings,
    *,
    truncated: bool,
    completion: Completion | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    key = record_key(record)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "suite": key[0],
        "sample_id": key[1],
        "epoch": key[2],
        "correct": bool(record.get("correct")),
        "judge_model": settings.model,
        "truncated": truncated,
        "error": error,
        "parsed": False,
        "parse_error": None,
        "modes": [],
        "categories": [],
        "evidence": {},
        "summary": "",
        "unknown_ids": [],
        "raw": None,
        "usage": None,
        "latency_s": None,
    }
    if completion is not None:
        verdict = parse_failure_verdict(completion.text)
        out.update(
            parsed=verdict.parsed,
            parse_error=verdict.parse_error,
            modes=verdict.modes,
            categories=sorted({MODES_BY_ID[m].category for m in verdict.modes}),
            evidence=verdict.evidence,
            summary=verdict.summary,
            unknown_ids=verdict.unknown_ids,
            raw=clip(completion.text, _RAW_REPLY_CHARS)[0],
            usage=completion.usage.model_dump(),
            latency_s=round(completion.latency_s, 4),
        )
    return out


async def judge_records(
    records: Sequence[dict[str, Any]],
    endpoint: Endpoint,
    settings: FailureJudgeSettings,
    sink: Callable[[dict[str, Any]], None],
    *,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Judge every record concurrently (the endpoint bounds calls in flight); returns the count.

    A judge call that fails for good is recorded as that verdict's `error` (redone on resume).
    """

    async def judge_one(record: dict[str, Any]) -> dict[str, Any]:
        messages, truncated = failure_judge_messages(record, settings.limits)
        try:
            completion = await endpoint.complete(messages, role="judge", gen=settings.gen)
        except EndpointError as exc:
            return verdict_record(record, settings, truncated=truncated, error=str(exc))
        return verdict_record(record, settings, truncated=truncated, completion=completion)

    written = 0
    for next_done in asyncio.as_completed([judge_one(r) for r in records]):
        verdict = await next_done
        sink(verdict)
        written += 1
        if on_done is not None:
            on_done(verdict)
    return written
