"""MASLab's protocols for `mad`, `debate` and `autogen` (`--mas-option protocol=maslab`).

The paper's MAS numbers were measured with MASLab (MASWorks/MASLab 4ecccf5); these functions
make the same calls, in the same order, with the same information in each prompt, so a run can
be compared with them (docs/references.md §5; our wording).
Calls per question, for the default options:

- `mad` (Liang et al.): 3, 6 or 9 calls for 1, 2 or 3 rounds (affirmative, negative, moderator),
  stopping at the first moderator verdict with a non-empty `debate_answer`; when no round gives
  one, a judge makes 2 more calls on the *first* round's two answers (candidates, then a JSON
  decision): 11 calls.
- `debate` (Du et al.): 3 opening answers, one revision round (each agent sees the others'
  opening answers), then one aggregating call: 7 calls; the aggregator's reply is the answer.
- `autogen`: MASLab's hand-written assistant / user-proxy loop (no AutoGen library): the
  assistant answers; while neither says TERMINATE and turns remain, the user proxy (an LLM with
  no system prompt) replies and the assistant answers again: 1 to 5 calls for 3 turns.

Where MASLab's code would fail, these go on: a moderator or judge reply that is not JSON counts as
no answer (MASLab's `eval()` raises and the sample is lost); a request that fails raises
`EndpointError`, so the sample is recorded as errored and redone on resume (MASLab scores it as
an error and never retries it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from core.endpoint import Message
from mas import prompts
from mas.answers import extract_answer
from mas.base import Conversation, Models, Task, Transcript
from mas.json_reply import normalised_keys, parse_json_object
from mas.options import int_option, str_option

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def _ordinal(number: int) -> str:
    return _ORDINALS[number - 1] if number <= len(_ORDINALS) else f"{number}th"


def _debate_answer(text: str) -> tuple[bool, str]:
    """(parsed, the `debate_answer` field, "" when empty or missing)."""
    found = parse_json_object(text)
    if found is None:
        return False, ""
    value = normalised_keys(found).get("debateanswer")
    return True, "" if value is None else str(value).strip()


def _graded_text(task: Task, answer: str, reason: str) -> str:
    """MASLab's response is the bare `debate_answer`; it is graded as is when the suite can read
    an answer in it, else boxed (so "42" grades as `\\boxed{42}`)."""
    if not answer or extract_answer(task, answer) is not None:
        return answer
    return f"{reason}\n\nFinal answer: \\boxed{{{answer}}}".strip()


class _Chat:
    """One agent's memory: its messages so far, replies appended."""

    def __init__(self, name: str, system: str | None = None) -> None:
        self.name = name
        self.messages: list[Message] = [{"role": "system", "content": system}] if system else []
        self.replies: list[str] = []

    async def say(self, conversation: Conversation, prompt: str, round_number: int) -> str:
        self.messages.append({"role": "user", "content": prompt})
        completion = await conversation.call(self.name, list(self.messages), round=round_number)
        self.messages.append({"role": "assistant", "content": completion.text})
        self.replies.append(completion.text)
        return completion.text


async def mad(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    """Config: `rounds` (MASLab's max_round, 3). Roles: affirmative, negative, moderator, judge."""
    max_rounds = int_option(config, "rounds", 3)
    topic = task.prompt
    conversation = Conversation(models, task)
    debater_system = prompts.MASLAB_DEBATER_SYSTEM.format(topic=topic)
    moderator_system = prompts.MASLAB_MODERATOR_SYSTEM.format(topic=topic)
    affirmative = _Chat("affirmative", debater_system)
    negative = _Chat("negative", debater_system)
    moderator = _Chat("moderator", moderator_system)
    verdicts: list[dict[str, Any]] = []
    answer, reason = "", ""
    for round_number in range(1, max_rounds + 1):
        if round_number == 1:
            await affirmative.say(conversation, topic, 1)
            await negative.say(
                conversation, prompts.maslab_negative_opening(affirmative.replies[-1]), 1
            )
        else:
            await affirmative.say(
                conversation, prompts.maslab_rebuttal(negative.replies[-1]), round_number
            )
            await negative.say(
                conversation, prompts.maslab_rebuttal(affirmative.replies[-1]), round_number
            )
        verdict_text = await moderator.say(
            conversation,
            prompts.maslab_moderator_round(
                _ordinal(round_number), affirmative.replies[-1], negative.replies[-1]
            ),
            round_number,
        )
        parsed, answer = _debate_answer(verdict_text)
        reason = _reason(verdict_text)
        verdicts.append({"parsed": parsed, "answer": answer})
        if answer:
            break
    transcript = conversation.transcript
    transcript.rounds = len(verdicts)
    transcript.ended_early = len(verdicts) < max_rounds
    transcript.extra = {"protocol": "maslab", "verdicts": verdicts}
    if answer:
        transcript.stop_reason = "moderator_answered"
    else:
        # The judge reads the first round's answers, as MASLab's code does.
        judge = _Chat("judge", moderator_system)
        await judge.say(
            conversation,
            prompts.maslab_judge_candidates(affirmative.replies[0], negative.replies[0]),
            len(verdicts) + 1,
        )
        decision = await judge.say(
            conversation, prompts.maslab_judge_decision(topic), len(verdicts) + 1
        )
        parsed, answer = _debate_answer(decision)
        reason = _reason(decision)
        transcript.extra["judge"] = {"parsed": parsed, "answer": answer}
        transcript.stop_reason = "judge_answered" if answer else "judge_no_answer"
    transcript.final_answer = _graded_text(task, answer, reason)
    return transcript


def _reason(text: str) -> str:
    found = parse_json_object(text)
    return str(normalised_keys(found).get("reason") or "") if found else ""


async def debate(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    """Config: `agents` (3), `rounds` (revision rounds, 1: MASLab's rounds_num 2 counts the
    opening). Roles: each agent's name if mapped, else "debater"; "aggregator"."""
    agent_count = int_option(config, "agents", 3)
    revisions = int_option(config, "rounds", 1, minimum=0)
    conversation = Conversation(models, task)
    query = task.prompt
    chats = [_Chat(f"agent_{index}") for index in range(1, agent_count + 1)]

    async def speak(chat: _Chat, prompt: str, round_number: int) -> None:
        chat.messages.append({"role": "user", "content": prompt})
        role = chat.name if chat.name in models.by_role else "debater"
        completion = await conversation.call(
            chat.name, list(chat.messages), model_role=role, round=round_number
        )
        chat.messages.append({"role": "assistant", "content": completion.text})
        chat.replies.append(completion.text)

    opening = prompts.maslab_debate_opening(query)
    await asyncio.gather(*(speak(chat, opening, 0) for chat in chats))
    for round_number in range(1, revisions + 1):
        previous = [chat.replies[-1] for chat in chats]  # everyone sees the same round
        await asyncio.gather(
            *(
                speak(
                    chat,
                    prompts.maslab_debate_revision(
                        query, [text for other, text in enumerate(previous) if other != index]
                    ),
                    round_number,
                )
                for index, chat in enumerate(chats)
            )
        )
    finals = [chat.replies[-1] for chat in chats]
    reply = await conversation.call(
        "aggregator",
        [{"role": "user", "content": prompts.maslab_debate_aggregate(query, finals)}],
        round=revisions + 1,
    )
    transcript = conversation.transcript
    transcript.rounds = revisions
    transcript.final_answer = reply.text
    transcript.stop_reason = "aggregated"
    transcript.extra = {
        "protocol": "maslab",
        "agents": agent_count,
        "answers": {chat.name: extract_answer(task, chat.replies[-1]) for chat in chats},
    }
    return transcript


async def assistant_and_user_proxy(
    task: Task, models: Models, config: dict[str, Any]
) -> Transcript:
    """Config: `max_turns` (MASLab's max_turn, 3), `termination_word` ("TERMINATE").
    Roles: "assistant", "user_proxy"."""
    max_turns = int_option(config, "max_turns", 3)
    word = str_option(config, "termination_word", "TERMINATE")
    conversation = Conversation(models, task)
    system: Message = {"role": "system", "content": prompts.MASLAB_ASSISTANT_SYSTEM}
    assistant_history: list[Message] = []
    proxy_history: list[Message] = []  # the proxy "said" the task; it has no system prompt

    async def assistant(prompt: str, turn: int) -> str:
        messages = [system, *assistant_history, {"role": "user", "content": prompt}]
        return (await conversation.call("assistant", messages, round=turn)).text

    answer = await assistant(task.prompt, 1)
    assistant_history.append({"role": "user", "content": task.prompt})
    proxy_history.append({"role": "assistant", "content": task.prompt})
    ended_by = "assistant" if word in answer else ""
    turn = 1
    while not ended_by and turn < max_turns:
        turn += 1
        messages = [*proxy_history, {"role": "user", "content": answer}]
        proxy = (await conversation.call("user_proxy", messages, round=turn - 1)).text
        proxy_history.append({"role": "user", "content": answer})
        assistant_history.append({"role": "assistant", "content": answer})
        if word in proxy:
            ended_by = "user_proxy"
            break
        answer = await assistant(proxy, turn)
        proxy_history.append({"role": "assistant", "content": proxy})
        assistant_history.append({"role": "user", "content": proxy})
        if word in answer:
            ended_by = "assistant"
    transcript = conversation.transcript
    transcript.final_answer = answer
    transcript.rounds = sum(message.agent == "assistant" for message in transcript.messages)
    transcript.ended_early = bool(ended_by)
    transcript.stop_reason = f"{ended_by}_terminated" if ended_by else "max_turns"
    transcript.extra = {"protocol": "maslab", "max_turns": max_turns, "termination_word": word}
    return transcript
