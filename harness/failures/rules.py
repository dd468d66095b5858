"""A judge without a model: the MAST modes a transcript's structure shows, found by rules.

`mars failures --rules` labels each selected transcript with the modes below, each with the
message that shows it as evidence. It reads only what the eval run recorded (every agent
message with its round and finish reason, the handed-in answer, how the workflow stopped), so
its verdicts are deterministic, free, and always parse: a baseline beside an LLM judge, and the
only judge a model too small to write a verdict can have. It sees 8 of the 14 modes, and only
their structural signs; the other six (clarification, withholding, reasoning-action mismatch,
...) need a reader.

- FM-1.1 the handed-in answer cannot be read in the form the task asks (extraction failed).
- FM-1.2 a role whose protocol asks for a structured reply (a moderator's or judge's verdict)
  wrote one the workflow could not read (the workflow stopped on an `..._unreadable` reason).
- FM-1.3 an agent repeats one of its own earlier messages word for word.
- FM-1.5 a message ran into the token limit (finish reason `length`).
- FM-2.3 an agent's message attempts no answer at all (no `\\boxed{}` and no number).
- FM-2.5 an agent keeps its answer although every other agent agreed on another one in the
  round before.
- FM-3.1 the workflow ended early (agreement before its last round) on a wrong answer.
- FM-3.3 every agent's last answer is the same wrong answer: the group verified it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from itertools import pairwise
from typing import Any

from harness.failures.store import SCHEMA_VERSION
from harness.failures.taxonomy import MODES_BY_ID
from harness.failures.transcript import record_key

RULES_JUDGE = "rules-v1"  # the judge_model of a rule verdict; bump when a rule changes
_EVIDENCE_CHARS = 200
_BOXED = re.compile(r"\\boxed\s*\{?\s*([^}\n]*)")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")


def message_answer(text: str) -> str | None:
    """The answer a message commits to: its last `\\boxed{...}` (braces optional), normalised."""
    found = _BOXED.findall(text)
    if not found:
        return None
    answer = re.sub(r"\s+", " ", found[-1]).strip().strip(".$ ").lower()
    return answer or None


def _agent(message: dict[str, Any]) -> str:
    return str(message.get("agent") or message.get("role") or "agent")


def _quote(message: dict[str, Any]) -> str:
    text = re.sub(r"\s+", " ", str(message.get("text") or "")).strip()
    where = _agent(message)
    if message.get("round") is not None:
        where += f", round {message['round']}"
    return f"[{where}] {text[:_EVIDENCE_CHARS]}"


def _debaters(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each agent's messages in order, for agents that speak in more than one round."""
    by_agent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        by_agent[_agent(message)].append(message)
    return {agent: own for agent, own in by_agent.items() if len(own) > 1}


def _round_answers(messages: list[dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    """Per round (in order), each agent's answer in that round."""
    rounds: dict[str, dict[str, str | None]] = {}
    for message in messages:
        if message.get("round") is None:
            continue
        rounds.setdefault(str(message["round"]), {})[_agent(message)] = message_answer(
            str(message.get("text") or "")
        )
    return rounds


def rule_modes(record: dict[str, Any]) -> dict[str, str]:
    """Mode id -> evidence for every rule that fires on this eval record."""
    transcript = record.get("transcript") or {}
    messages = [m for m in transcript.get("messages") or [] if isinstance(m, dict)]
    found: dict[str, str] = {}
    wrong = not record.get("correct")
    if record.get("extraction_failed"):
        found["FM-1.1"] = f"handed-in answer: {str(record.get('final_answer') or '')[:120]!r}"
    stop = str(transcript.get("stop_reason") or (record.get("metrics") or {}).get("stop_reason"))
    if stop.endswith("_unreadable"):
        role = stop.removesuffix("_unreadable")
        last = [m for m in messages if m.get("agent") == role]
        found["FM-1.2"] = _quote(last[-1]) if last else f"the workflow stopped: {stop}"
    for own in _debaters(messages).values():
        seen: set[str] = set()
        for message in own:
            text = re.sub(r"\s+", " ", str(message.get("text") or "")).strip()
            if text and text in seen and "FM-1.3" not in found:
                found["FM-1.3"] = _quote(message)
            seen.add(text)
    answering = {_agent(m) for m in messages if message_answer(str(m.get("text") or ""))}
    for message in messages:
        text = str(message.get("text") or "")
        if message.get("finish_reason") == "length" and "FM-1.5" not in found:
            found["FM-1.5"] = _quote(message)
        derailed = message_answer(text) is None and not _NUMBER.search(text)
        if derailed and _agent(message) in answering and "FM-2.3" not in found:
            found["FM-2.3"] = _quote(message)
    rounds = list(_round_answers(messages).values())
    for earlier, later in pairwise(rounds):
        for agent, answer in later.items():
            others = [a for other, a in earlier.items() if other != agent and a is not None]
            if (
                answer is not None
                and answer == earlier.get(agent)
                and len(others) >= 2
                and len(set(others)) == 1
                and answer != others[0]
            ):
                evidence = f"{agent} kept {answer!r}; the others said {others[0]!r}"
                found.setdefault("FM-2.5", evidence)
    if wrong and transcript.get("ended_early"):
        found["FM-3.1"] = f"ended early after {transcript.get('rounds')} rounds: {stop}"
    if wrong and rounds:
        last = [a for agent, a in rounds[-1].items() if agent in answering]
        if len(last) > 1 and len(set(last)) == 1 and last[0] is not None:
            found["FM-3.3"] = f"every agent's last answer: {last[0]!r}"
    return found


def rule_verdict(record: dict[str, Any]) -> dict[str, Any]:
    """A failures.jsonl verdict, as the LLM judge's are written, from the rules alone."""
    suite, sample_id, epoch = record_key(record)
    modes = rule_modes(record)
    ordered = sorted(modes)
    return {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "sample_id": sample_id,
        "epoch": epoch,
        "correct": bool(record.get("correct")),
        "judge_model": RULES_JUDGE,
        "truncated": False,
        "error": None,
        "parsed": True,
        "parse_error": None,
        "modes": ordered,
        "categories": sorted({MODES_BY_ID[m].category for m in ordered}),
        "evidence": {m: modes[m] for m in ordered},
        "summary": "rules: " + (", ".join(ordered) or "no structural failure sign"),
        "unknown_ids": [],
        "raw": None,
        "usage": None,
        "latency_s": None,
    }
