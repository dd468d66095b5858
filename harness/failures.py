"""MAST failure-mode analysis of eval transcripts with an LLM judge (`mars failures`).

For each selected record of an eval run (by default the graded-wrong ones: `correct` false and no
`error`) the judge reads the question, the gold and handed-in answers and the multi-agent
transcript, and names the MAST failure modes present (`harness.mast`) with a short quote as
evidence. One verdict per transcript is appended to `failures.jsonl` beside the run's records;
`failures_summary.json` holds the per-category and per-mode rates with Wilson 95% intervals.

Truncation (so a long debate fits the judge's context, deterministically):
1. the question keeps its first `question_chars` characters (head and tail, see `clip`);
2. inside each message, the chain of thought keeps `reasoning_chars` and the message text
   `message_chars`: the first two thirds and the last third of the budget, with a marker saying
   how many characters were cut;
3. if the clipped messages still exceed `transcript_chars`, whole messages are dropped from the
   middle of the conversation (messages are kept alternately from the start and the end) and a
   marker says how many were omitted.
The verdict records whether its transcript was truncated.

The judge's reply is parsed leniently (a JSON object, fenced or not, with text around it; mode
ids such as "FM-2.3", "fm 2.3" or "2.3"); a reply with no usable JSON is recorded as a parse
failure, never an exception. A rerun skips every transcript already judged (parse failures
included, unless asked to retry them) and redoes only the ones whose judge call failed.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import EndpointError, MarsError
from harness.files import read_jsonl, write_json_atomic, write_jsonl_atomic
from harness.mast import (
    CATEGORIES,
    CATEGORIES_BY_KEY,
    FAILURE_MODES,
    MODES_BY_ID,
    normalize_mode_id,
    taxonomy_text,
)
from harness.runstore import canonical, refuse_changed_identity
from harness.stats import paired_bootstrap_diff, wilson_ci

if TYPE_CHECKING:  # the dashboard reads verdicts without loading the endpoint layer (openai)
    from harness.endpoint import Completion, Endpoint, GenerationConfig, Message

SCHEMA_VERSION = 1
FAILURES_FILE = "failures.jsonl"
FAILURES_SUMMARY_FILE = "failures_summary.json"
FAILURES_RUN_FILE = "failures_run.json"  # the analysis's identity, written before judging
_RAW_REPLY_CHARS = 4000
_EVIDENCE_CHARS = 300

Key = tuple[str, str, int]


# ---------------------------------------------------------------- selection and keys


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


# ---------------------------------------------------------------- prompt and truncation


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


# ---------------------------------------------------------------- lenient verdict parsing


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


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_LIST_KEYS = ("failure_modes", "failuremodes", "modes", "failures", "labels", "mast")
_ID_KEYS = ("id", "mode", "code", "failure_mode", "label", "name")
_EVIDENCE_KEYS = ("evidence", "quote", "quotes", "reason", "explanation")


def _json_objects(text: str) -> Iterable[dict[str, Any]]:
    """Every JSON object that starts at a '{' in `text` (fenced blocks first), leniently."""
    decoder = json.JSONDecoder()
    sources = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for source in sources:
        for variant in (source, _TRAILING_COMMA.sub(r"\1", source)):
            for start in (m.start() for m in re.finditer(r"\{", variant)):
                try:
                    value, _ = decoder.raw_decode(variant, start)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    yield value


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
    """The judge's reply as a verdict; a reply with no usable JSON is a parse failure."""
    found_object = False
    for obj in _json_objects(text or ""):
        found_object = True
        verdict = _verdict_from(obj)
        if verdict is not None:
            return verdict
    reason = "no failure_modes field in the JSON" if found_object else "no JSON object in reply"
    return Verdict(parse_error=reason)


# ---------------------------------------------------------------- failures.jsonl


class FailuresFile:
    """failures.jsonl: one verdict per judged transcript; malformed lines skipped and counted."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Malformed lines met by this command: those `prepare_resume` dropped from the file
        # (e.g. a line cut short by a kill) plus those the latest `records()` skipped.
        self.malformed_lines = 0
        self._dropped_malformed = 0

    def records(self) -> list[dict[str, Any]]:
        read = read_jsonl(self.path)
        out = [value for value in read.rows if _has_key(value)]
        self.malformed_lines = self._dropped_malformed + read.malformed + len(read.rows) - len(out)
        return out

    def append(self, verdict: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(verdict, ensure_ascii=False, default=str) + "\n")
            handle.flush()

    def prepare_resume(self, keep: Callable[[dict[str, Any]], bool]) -> dict[Key, dict[str, Any]]:
        """Rewrite the file keeping the first verdict per key that `keep` accepts; return them."""
        kept: dict[Key, dict[str, Any]] = {}
        for verdict in self.records():
            if keep(verdict):
                kept.setdefault(record_key(verdict), verdict)
        self._dropped_malformed = self.malformed_lines
        if self.path.exists():
            write_jsonl_atomic(self.path, kept.values())
        return kept


def failures_identity(judge_model: str | None, settings: FailureJudgeSettings) -> dict[str, Any]:
    """What a verdict means: the judge (a model name, or a served checkpoint's fingerprint),
    its generation settings and the truncation limits. The selection (`--all`, `--limit`) is
    not part of it: a rerun may judge more transcripts with the same judge."""
    return canonical(
        {
            "kind": "failures",
            "judge_model": judge_model,
            "generation": settings.gen.model_dump(),
            "limits": asdict(settings.limits),
        }
    )


def check_failures_identity(run_path: Path, identity: dict[str, Any]) -> None:
    """Refuse to resume an analysis judged with other settings (before any file changes).

    An analysis from before identities were stored adopts this one (a note is printed)."""
    path = Path(run_path) / FAILURES_RUN_FILE
    if path.is_file():
        try:
            stored = json.loads(path.read_text()).get("identity")
        except (OSError, ValueError, AttributeError) as exc:
            raise MarsError(f"cannot read {path}: {exc}") from exc
    elif (Path(run_path) / FAILURES_FILE).is_file():
        stored = None  # verdicts without a stored identity: an older analysis
    else:
        return
    note = refuse_changed_identity(Path(run_path) / FAILURES_FILE, stored, identity)
    if note:
        print(note)


def write_failures_identity(run_path: Path, identity: dict[str, Any]) -> None:
    payload = {"schema_version": SCHEMA_VERSION, "identity": identity}
    write_json_atomic(Path(run_path) / FAILURES_RUN_FILE, payload)


def _has_key(value: dict[str, Any]) -> bool:
    try:
        record_key(value)
    except (KeyError, TypeError, ValueError):
        return False
    return True


def is_judged(verdict: dict[str, Any], *, retry_unparsed: bool = False) -> bool:
    """A verdict that a rerun keeps: the judge answered (and parsed, if asked)."""
    if verdict.get("error"):
        return False
    return bool(verdict.get("parsed")) or not retry_unparsed


# ---------------------------------------------------------------- judging


def _judge_generation() -> GenerationConfig:
    from harness.endpoint import GenerationConfig

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


# ---------------------------------------------------------------- rates and comparison


def _rate(count: int, n: int) -> dict[str, Any]:
    low, high = wilson_ci(count, n)
    return {"count": count, "n": n, "rate": count / n if n else 0.0, "ci95": [low, high]}


def judged_verdicts(verdicts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One parsed verdict per key (the first): the denominator of every rate."""
    seen: dict[Key, dict[str, Any]] = {}
    for verdict in verdicts:
        if verdict.get("error") or not verdict.get("parsed"):
            continue
        try:
            seen.setdefault(record_key(verdict), verdict)
        except (KeyError, TypeError, ValueError):
            continue
    return list(seen.values())


def _modes_of(verdict: dict[str, Any]) -> set[str]:
    return {m for m in verdict.get("modes") or [] if m in MODES_BY_ID}


def _indicators(verdict: dict[str, Any]) -> dict[str, bool]:
    """Per mode id, per category key and 'any': does this verdict show it?"""
    modes = _modes_of(verdict)
    flags = {mode.id: mode.id in modes for mode in FAILURE_MODES}
    for category in CATEGORIES:
        flags[category.key] = any(MODES_BY_ID[m].category == category.key for m in modes)
    flags["any"] = bool(modes)
    return flags


def summarize_failures(verdicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rates over the parsed verdicts: a category counts when any of its modes is present."""
    judged = judged_verdicts(verdicts)
    n = len(judged)
    flags = [_indicators(v) for v in judged]
    keys = {record_key(v) for v in verdicts if _has_key(v)}
    parse_failures = sum(
        1 for v in verdicts if not v.get("error") and not v.get("parsed") and _has_key(v)
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "n_verdicts": len(keys),
        "n_judged": n,
        "parse_failures": parse_failures,
        "errors": sum(1 for v in verdicts if v.get("error")),
        "truncated": sum(1 for v in judged if v.get("truncated")),
        "judge_models": sorted({str(v.get("judge_model")) for v in judged}),
        "any_failure": _rate(sum(f["any"] for f in flags), n),
        "categories": {
            c.key: {"id": c.id, "name": c.name, **_rate(sum(f[c.key] for f in flags), n)}
            for c in CATEGORIES
        },
        "modes": {
            m.id: {"name": m.name, "category": m.category, **_rate(sum(f[m.id] for f in flags), n)}
            for m in FAILURE_MODES
        },
    }


def unpaired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean(b) - mean(a) for independent samples, with a percentile bootstrap 95% interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0:
        return (0.0, 0.0, 0.0)
    rng = np.random.default_rng(seed)
    boot_x = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    boot_y = y[rng.integers(0, y.size, size=(n_boot, y.size))].mean(axis=1)
    diffs = boot_y - boot_x
    return (
        float(y.mean() - x.mean()),
        float(np.quantile(diffs, 0.025)),
        float(np.quantile(diffs, 0.975)),
    )


def compare_failures(
    verdicts_a: Sequence[dict[str, Any]],
    verdicts_b: Sequence[dict[str, Any]],
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Rate of B minus rate of A per category, mode and 'any', with a bootstrap 95% interval.

    Paired (resampling shared transcripts) when both runs judged exactly the same keys, e.g. both
    analysed with `--all` on the same samples; otherwise unpaired (each run resampled on its
    own), which is the case for failed-only analyses of two checkpoints.
    """
    judged_a = {record_key(v): _indicators(v) for v in judged_verdicts(verdicts_a)}
    judged_b = {record_key(v): _indicators(v) for v in judged_verdicts(verdicts_b)}
    paired = bool(judged_a) and set(judged_a) == set(judged_b)
    shared = sorted(set(judged_a) & set(judged_b))

    def row(flag: str) -> dict[str, Any]:
        if paired:
            xs = [float(judged_a[k][flag]) for k in shared]
            ys = [float(judged_b[k][flag]) for k in shared]
            diff, low, high = paired_bootstrap_diff(xs, ys, n_boot=n_boot, seed=seed)
        else:
            xs = [float(f[flag]) for f in judged_a.values()]
            ys = [float(f[flag]) for f in judged_b.values()]
            diff, low, high = unpaired_bootstrap_diff(xs, ys, n_boot=n_boot, seed=seed)
        return {
            "rate_a": float(np.mean(xs)) if xs else 0.0,
            "rate_b": float(np.mean(ys)) if ys else 0.0,
            "diff": diff,
            "ci95": [low, high],
        }

    return {
        "method": "paired" if paired else "unpaired",
        "n_a": len(judged_a),
        "n_b": len(judged_b),
        "n_shared": len(shared),
        "any_failure": row("any"),
        "categories": {c.key: {"id": c.id, "name": c.name, **row(c.key)} for c in CATEGORIES},
        "modes": {m.id: {"name": m.name, **row(m.id)} for m in FAILURE_MODES},
    }


def load_failures(run_path: Path) -> tuple[list[dict[str, Any]], int]:
    """The verdicts of a run directory and the number of malformed lines skipped."""
    file = FailuresFile(Path(run_path) / FAILURES_FILE)
    verdicts = file.records()
    return verdicts, file.malformed_lines


def category_name(key: str) -> str:
    category = CATEGORIES_BY_KEY.get(key)
    return category.name if category else key
