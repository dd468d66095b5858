"""`debate`: LLM Debate after Du et al. (2023), "Improving Factuality and Reasoning in Language
Models through Multiagent Debate".

`agents` agents (default 3) answer the task independently, then revise for `rounds` rounds
(default 2), each time seeing the other agents' latest solutions. The agents of one round do not
depend on each other, so their calls run concurrently; the rounds run in order. Calls:
agents x (rounds + 1), plus one with `aggregate`.

The final answer is the majority vote over the agents' last answers, as in the paper: answers are
read with the task's suite extractor and compared by `answer_key` (so "18" and "18.0" agree).
Ties go to the tied answer held by the lowest-numbered agent; agents without a readable answer do
not vote. The graded text is the last reply of the lowest-numbered agent holding the winning answer,
so it grades exactly as the vote counted it. With `aggregate: true` an extra "aggregator" call
writes the final solution from all agents' answers instead (the vote is kept in `extra`, and used
if the aggregator gives no readable answer).

Config: `agents` (default 3), `rounds` (default 2), `aggregate` (default false),
`stop_on_consensus` (default false: stop revising once all agents give the same answer),
`protocol` ("default", or "maslab" for MASLab's version, `mas.maslab.debate`).
Model roles: each agent's own name ("agent_1", ...) if mapped, else "debater"; "aggregator".
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from core.endpoint import Message
from mas import maslab, prompts
from mas.answers import answer_key, extract_answer
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import bool_option, int_option, protocol_option


class _Agent:
    def __init__(self, index: int, models: Models) -> None:
        self.name = f"agent_{index}"
        self.model_role = self.name if self.name in models.by_role else "debater"
        self.history: list[Message] = [{"role": "system", "content": prompts.DEBATE_AGENT_SYSTEM}]
        self.last_reply = ""

    async def answer(self, conversation: Conversation, prompt: str, round_number: int) -> None:
        messages = [*self.history, {"role": "user", "content": prompt}]
        completion = await conversation.call(
            self.name, messages, model_role=self.model_role, round=round_number
        )
        self.history = [*messages, {"role": "assistant", "content": completion.text}]
        self.last_reply = completion.text


def majority_vote(task: Task, replies: list[tuple[str, str]]) -> tuple[int | None, dict[str, Any]]:
    """Index (into `replies`) of the reply that carries the winning answer, and the tally.

    Ties go to the tied answer of the earliest reply; None when no reply has a readable answer.
    """
    answers = [extract_answer(task, text) for _, text in replies]
    keys = [None if answer is None else answer_key(answer, task.kind) for answer in answers]
    counts = Counter(key for key in keys if key is not None)
    tally: dict[str, Any] = {
        "answers": {name: answer for (name, _), answer in zip(replies, answers, strict=True)},
        "votes": dict(counts),
        "tie": False,
    }
    if not counts:
        return None, tally
    top = max(counts.values())
    tally["tie"] = sum(count == top for count in counts.values()) > 1
    winner = next(index for index, key in enumerate(keys) if key is not None and counts[key] == top)
    tally["winner"] = answers[winner]
    return winner, tally


@mas("debate")
async def llm_debate(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    if protocol_option(config, allowed=("agents", "rounds")) == "maslab":
        return await maslab.debate(task, models, config)
    agent_count = int_option(config, "agents", 3)
    revision_rounds = int_option(config, "rounds", 2, minimum=0)
    aggregate = bool_option(config, "aggregate", False)
    stop_on_consensus = bool_option(config, "stop_on_consensus", False)
    conversation = Conversation(models, task)
    agents = [_Agent(index, models) for index in range(1, agent_count + 1)]

    await asyncio.gather(*(agent.answer(conversation, task.prompt, 0) for agent in agents))
    rounds_used = 0
    for round_number in range(1, revision_rounds + 1):
        if stop_on_consensus and _consensus(task, agents):
            break
        # Everyone revises against the same snapshot of the previous round.
        snapshot = [(agent.name, agent.last_reply) for agent in agents]
        await asyncio.gather(
            *(
                agent.answer(
                    conversation,
                    prompts.debate_revision(
                        task, [(name, text) for name, text in snapshot if name != agent.name]
                    ),
                    round_number,
                )
                for agent in agents
            )
        )
        rounds_used = round_number

    replies = [(agent.name, agent.last_reply) for agent in agents]
    winner, tally = majority_vote(task, replies)
    transcript = conversation.transcript
    transcript.rounds = rounds_used
    transcript.ended_early = rounds_used < revision_rounds
    transcript.extra = {"vote": tally, "agents": agent_count}
    if winner is None:
        transcript.final_answer = replies[0][1]
        transcript.stop_reason = "no_readable_answer"
    else:
        transcript.final_answer = replies[winner][1]
        transcript.stop_reason = "majority_tie_lowest_agent" if tally["tie"] else "majority_vote"
    if transcript.ended_early:
        transcript.extra["consensus_after_round"] = rounds_used
    if aggregate:
        reply = await conversation.ask(
            "aggregator",
            prompts.DEBATE_AGGREGATOR_SYSTEM,
            prompts.debate_aggregate(task, replies),
            round=rounds_used + 1,
        )
        if extract_answer(task, reply.text) is not None:
            transcript.final_answer = reply.text
            transcript.stop_reason = "aggregated"
        else:
            transcript.stop_reason = f"aggregator_unreadable_{transcript.stop_reason}"
    return transcript


def _consensus(task: Task, agents: list[_Agent]) -> bool:
    keys = set()
    for agent in agents:
        answer = extract_answer(task, agent.last_reply)
        if answer is None:
            return False
        keys.add(answer_key(answer, task.kind))
    return len(keys) == 1
