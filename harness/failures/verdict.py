"""The judge's reply, parsed leniently into a verdict: MAST mode ids with a quote each."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.failures.taxonomy import (
    normalize_mode_id,
)

_EVIDENCE_CHARS = 300


@dataclass
class Verdict:
    modes: list[str] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    unknown_ids: list[str] = field(default_factory=list)
    parse_error: str | None = None

    @property
    def parsed(self) -> bool:
        return self.parse_error is None


# The fence's head is read at once (a lookahead does not backtrack): backtracking into `\s*`
# after a fence that is never closed would scan to the reply's end once per blank character.
_FENCE = re.compile(r"```(?=(?P<head>(?:json|JSON)?\s*))(?P=head)(?P<body>.*?)```", re.DOTALL)
_OBJECT_START = re.compile(r"\{(?=\s*[\"}])")  # a JSON object opens with a key or closes at once
_BRACKET = re.compile(r"[\[\]{}]")
# Every '{' is tried as the start of an object, so the work can grow with the square of the text
# read: the judge answers in at most 1,024 tokens (judge.py), and a longer reply is read from its
# end; a '{' that more than MAX_DEPTH brackets follow before it closes (counted in strings too)
# is passed over (no verdict nests so deep, and decoding such a nest from each of its braces
# would run to the recursion limit every time).
MAX_VERDICT_CHARS = 16_384
MAX_DEPTH = 64
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_LIST_KEYS = ("failure_modes", "failuremodes", "modes", "failures", "labels", "mast")
_ID_KEYS = ("id", "mode", "code", "failure_mode", "label", "name")
_EVIDENCE_KEYS = ("evidence", "quote", "quotes", "reason", "explanation")


def _json_objects(text: str) -> Iterable[dict[str, Any]]:
    """Every JSON object that starts at a '{' in `text` (fenced blocks first), leniently."""
    decoder = json.JSONDecoder()
    sources = [m.group("body") for m in _FENCE.finditer(text)] + [text]
    for source in sources:
        for variant in (source, _TRAILING_COMMA.sub(r"\1", source)):
            for start in _object_starts(variant):
                try:
                    value, _ = decoder.raw_decode(variant, start)
                except (json.JSONDecodeError, RecursionError):  # not JSON, or nested too deep
                    continue
                if isinstance(value, dict):
                    yield value


def _object_starts(text: str) -> list[int]:
    """Where an object may start: a '{' that a key or its '}' follows, not nested too deep."""
    deep: set[int] = set()
    open_brackets: list[int] = []
    marked = 0  # open_brackets[:marked] are in `deep`
    for bracket in _BRACKET.finditer(text):
        if bracket.group() in "[{":
            open_brackets.append(bracket.start())
            if len(open_brackets) > MAX_DEPTH:
                deep.update(open_brackets[marked : len(open_brackets) - MAX_DEPTH])
                marked = len(open_brackets) - MAX_DEPTH
        elif open_brackets:
            open_brackets.pop()
            marked = min(marked, len(open_brackets))
    return [m.start() for m in _OBJECT_START.finditer(text) if m.start() not in deep]


def _lower_keys(obj: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower().replace(" ", "_").replace("-", "_"): v for k, v in obj.items()}


def _evidence_of(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        lowered = _lower_keys(item)
        for key in _EVIDENCE_KEYS:
            value = lowered.get(key)
            if isinstance(value, list):
                value = " / ".join(str(v) for v in value)
            if value:
                return str(value)
    return ""


def _present(value: Any) -> bool:
    """For {"FM-1.1": value} maps: true, "yes", a non-empty quote, or {"present": true}."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() not in {"", "no", "false", "absent", "none", "n/a", "0"}
    if isinstance(value, dict):
        lowered = _lower_keys(value)
        for key in ("present", "detected", "value", "occurs"):
            if key in lowered:
                return _present(lowered[key])
        return bool(_evidence_of(value))
    return False


def _verdict_from(obj: dict[str, Any]) -> Verdict | None:
    lowered = _lower_keys(obj)
    verdict = Verdict(summary=str(lowered.get("summary") or "")[:_EVIDENCE_CHARS])
    listing = next((lowered[k] for k in _LIST_KEYS if k in lowered), None)
    entries: list[tuple[Any, Any]] = []  # (raw id, evidence source)
    if isinstance(listing, list):
        for item in listing:
            if isinstance(item, dict):
                item_keys = _lower_keys(item)
                raw_id = next((item_keys[k] for k in _ID_KEYS if k in item_keys), None)
                entries.append((raw_id, item))
            else:
                entries.append((item, None))
    elif isinstance(listing, dict):
        entries = [(k, v) for k, v in listing.items() if _present(v)]
    elif listing is None:
        id_keys = [k for k in obj if normalize_mode_id(str(k))]
        if not id_keys:
            return None
        entries = [(k, obj[k]) for k in id_keys if _present(obj[k])]
    else:
        return None
    for raw_id, source in entries:
        mode_id = normalize_mode_id(raw_id if isinstance(raw_id, str) else str(raw_id))
        if mode_id is None:
            verdict.unknown_ids.append(str(raw_id)[:40])
            continue
        if mode_id not in verdict.modes:
            verdict.modes.append(mode_id)
            quote = _evidence_of(source).strip()
            if quote:
                verdict.evidence[mode_id] = quote[:_EVIDENCE_CHARS]
    verdict.modes.sort()
    return verdict


def parse_failure_verdict(text: str) -> Verdict:
    """The judge's reply as a verdict; a reply with no usable JSON is a parse failure. Only its
    last MAX_VERDICT_CHARS characters are read."""
    found_object = False
    for obj in _json_objects((text or "")[-MAX_VERDICT_CHARS:]):
        found_object = True
        verdict = _verdict_from(obj)
        if verdict is not None:
            return verdict
    reason = "no failure_modes field in the JSON" if found_object else "no JSON object in reply"
    return Verdict(parse_error=reason)
