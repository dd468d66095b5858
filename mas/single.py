"""`single`: one agent, chain of thought, boxed answer. The baseline every MAS is compared to."""

from __future__ import annotations

from typing import Any

from mas.base import Conversation, Models, Task, Transcript, mas

SOLVER_SYSTEM = "You are a careful problem solver. Think step by step, then give the final answer."


@mas("single", roles=("solver",))
async def single_agent(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    conversation = Conversation(models, task)
    reply = await conversation.ask(
        "solver", config.get("system_prompt", SOLVER_SYSTEM), task.prompt, round=0
    )
    transcript = conversation.transcript
    transcript.final_answer = reply.text
    transcript.rounds = 1
    transcript.stop_reason = "answered"
    return transcript
