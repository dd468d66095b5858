"""`mad`: Multi-Agent Debate after Liang et al. (EMNLP 2024).

An affirmative and a negative debater argue for up to `rounds` rounds (default 3); after each
round a moderator gives a JSON verdict. The debate stops as soon as the verdict prefers a side or
names an answer; if no round is decisive, a judge picks between the two final positions. Every turn
depends on the one before it, so the calls of one sample run strictly in order (3 to 10 calls).

The graded answer is the chosen side's last reply in full (its reasoning and its boxed answer).
A verdict that cannot be parsed counts as "no decision": the debate goes on, and the judge
decides at the end; an unparseable judge reply falls back to a fixed rule (see `_resolve`).

Config: `rounds` (int, default 3); `force_rounds` (bool, default false: run every round even
after a decisive verdict; the last round's verdict, else the judge, then decides); `protocol`
("default", or "maslab" for MASLab's version, `mas.maslab.mad`).
Model roles: "affirmative", "negative", "moderator", "judge" (each defaults to `Models.default`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.endpoint import Message
from mas import maslab, prompts
from mas.answers import answer_key, extract_answer
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.json_reply import normalised_keys, parse_json_object
from mas.options import bool_option, int_option, protocol_option

SIDES = ("affirmative", "negative")
_EMPTY_ANSWERS = {"", "none", "null", "n/a", "na", "unknown", "undecided"}


@dataclass
class Verdict:
    """A moderator's or judge's decision, as far as it could be read."""

    parsed: bool
    side: str | None = None
    answer: str = ""
    reason: str = ""

    @property
    def decisive(self) -> bool:
        return self.side is not None or bool(self.answer)

    def as_dict(self) -> dict[str, Any]:
        return {"parsed": self.parsed, "side": self.side, "answer": self.answer}


def _side_of(value: Any) -> str | None:
    text = str(value or "").strip().lower()
    if "affirm" in text:
        return "affirmative"
    if "negat" in text:
        return "negative"
    return None


def parse_debate_verdict(text: str) -> Verdict:
    """Read a verdict JSON leniently; the key names of the original MAD prompt also work."""
    found = parse_json_object(text)
    if found is None:
        return Verdict(parsed=False)
    fields = normalised_keys(found)
    preference = fields.get("whetherthereisapreference", fields.get("preference"))
    declined = preference is False or str(preference).strip().lower() in {"no", "false"}
    side_value = next(
        (
            fields[key]
            for key in ("preferredside", "supportedside", "winner", "side")
            if key in fields
        ),
        None,
    )
    answer_value = next(
        (fields[key] for key in ("answer", "debateanswer", "finalanswer") if key in fields), ""
    )
    answer = "" if answer_value is None else str(answer_value).strip()
    if answer.lower() in _EMPTY_ANSWERS:
        answer = ""
    if declined:
        return Verdict(parsed=True, reason=str(fields.get("reason", "")))
    return Verdict(
        parsed=True, side=_side_of(side_value), answer=answer, reason=str(fields.get("reason", ""))
    )


class _Debater:
    """One side's growing chat: its system prompt, the prompts it saw and its own replies."""

    def __init__(self, name: str, system: str) -> None:
        self.name = name
        self.history: list[Message] = [{"role": "system", "content": system}]
        self.last_reply = ""

    async def speak(self, conversation: Conversation, prompt: str, round_number: int) -> str:
        self.history.append({"role": "user", "content": prompt})
        completion = await conversation.call(self.name, list(self.history), round=round_number)
        self.history.append({"role": "assistant", "content": completion.text})
        self.last_reply = completion.text
        return completion.text


@mas("mad", roles=(*SIDES, "moderator", "judge"))
async def multi_agent_debate(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    if protocol_option(config, allowed=("rounds",)) == "maslab":
        return await maslab.mad(task, models, config)
    max_rounds = int_option(config, "rounds", 3)
    force_rounds = bool_option(config, "force_rounds", False)
    conversation = Conversation(models, task)
    affirmative = _Debater("affirmative", prompts.MAD_AFFIRMATIVE_SYSTEM)
    negative = _Debater("negative", prompts.MAD_NEGATIVE_SYSTEM)
    moderator: list[Message] = [{"role": "system", "content": prompts.MAD_MODERATOR_SYSTEM}]
    verdicts: list[Verdict] = []

    rounds_used = 0
    for round_number in range(1, max_rounds + 1):
        rounds_used = round_number
        if round_number == 1:
            await affirmative.speak(conversation, task.prompt, round_number)
            await negative.speak(
                conversation,
                prompts.mad_negative_first(task, affirmative.last_reply),
                round_number,
            )
        else:
            await affirmative.speak(
                conversation,
                prompts.mad_rebuttal(task, "negative", negative.last_reply),
                round_number,
            )
            await negative.speak(
                conversation,
                prompts.mad_rebuttal(task, "affirmative", affirmative.last_reply),
                round_number,
            )
        moderator.append(
            {
                "role": "user",
                "content": prompts.mad_moderator_round(
                    task, round_number, affirmative.last_reply, negative.last_reply
                ),
            }
        )
        reply = await conversation.call("moderator", list(moderator), round=round_number)
        moderator.append({"role": "assistant", "content": reply.text})
        verdicts.append(parse_debate_verdict(reply.text))
        if verdicts[-1].decisive and not force_rounds:
            break

    positions = {"affirmative": affirmative.last_reply, "negative": negative.last_reply}
    transcript = conversation.transcript
    transcript.rounds = rounds_used
    transcript.ended_early = rounds_used < max_rounds
    if verdicts[-1].decisive:
        decider, verdict = "moderator", verdicts[-1]
    else:
        judge_prompt = prompts.mad_judge(task, positions["affirmative"], positions["negative"])
        judge_reply = await conversation.ask("judge", prompts.MAD_JUDGE_SYSTEM, judge_prompt)
        decider, verdict = "judge", parse_debate_verdict(judge_reply.text)
    side, rule = _resolve(task, verdict, positions)
    transcript.final_answer = _final_answer(task, side, verdict, positions)
    transcript.stop_reason = f"{decider}_decided" if verdict.decisive else f"{decider}_unreadable"
    transcript.extra = {
        "decided_by": decider,
        "chosen_side": side,
        "side_rule": rule,
        "verdicts": [v.as_dict() for v in verdicts],
        "unparsed_verdicts": sum(not v.parsed for v in verdicts),
        "candidates": {name: extract_answer(task, text) for name, text in positions.items()},
    }
    if decider == "judge":
        transcript.extra["judge_verdict"] = verdict.as_dict()
    return transcript


def _resolve(task: Task, verdict: Verdict, positions: dict[str, str]) -> tuple[str | None, str]:
    """Which side's reply becomes the graded answer, and the rule that chose it.

    1. the side the verdict names; 2. the side whose answer equals the verdict's answer (the
    affirmative first if both do); 3. a verdict answer that matches neither side: no side (the
    answer is graded from the verdict itself); 4. no usable verdict: the sides' common answer if
    they agree, else the affirmative side (it answered the problem first and unprompted).
    """
    if verdict.side is not None:
        return verdict.side, "named"
    candidates = {name: extract_answer(task, text) for name, text in positions.items()}
    if verdict.answer:
        wanted = answer_key(_verdict_answer(task, verdict), task.kind)
        for name in SIDES:
            found = candidates[name]
            if found is not None and answer_key(found, task.kind) == wanted:
                return name, "answer_match"
        return None, "verdict_answer"
    answered = [name for name in SIDES if candidates[name] is not None]
    if len(answered) == 1:
        return answered[0], "only_answer"
    return "affirmative", "fallback_affirmative"


def _verdict_answer(task: Task, verdict: Verdict) -> str:
    """The verdict's answer without markup ("\\boxed{42}" -> "42")."""
    return extract_answer(task, verdict.answer) or verdict.answer


def _final_answer(task: Task, side: str | None, verdict: Verdict, positions: dict[str, str]) -> str:
    if side is None:
        boxed = _verdict_answer(task, verdict)
        return f"{verdict.reason}\n\nFinal answer: \\boxed{{{boxed}}}".strip()
    text = positions[side]
    if extract_answer(task, text) is None and verdict.answer:
        # The chosen side never stated an answer the grader can read; the verdict's answer is it.
        text = f"{text}\n\nFinal answer: \\boxed{{{_verdict_answer(task, verdict)}}}"
    return text
