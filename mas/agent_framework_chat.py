"""`agent_framework`: a solver and a critic in a Microsoft Agent Framework group chat.

Two `agent_framework.Agent`s take turns in a `GroupChatBuilder` workflow whose speaker selection
is a plain function (solver, critic, solver, ...): the solver answers, the critic checks and
either explains a mistake or approves by writing the approval word (default "TERMINATE"). The chat
ends when the critic's latest message holds the approval word (a termination condition over the
conversation, so the word in the task or in a solver reply never ends it) or after `max_rounds`
agent turns (default 2 x `max_solver_turns` - 1 = 5: solver, critic, solver, critic, solver).

Both agents run on `EndpointAgentClient`, so their calls go through the project's endpoint layer
and are recorded in the transcript under the agent names. The graded answer is the solver's last
message with a readable answer (else its last message).

Config: `max_solver_turns` (default 3), `max_rounds` (overrides the turn cap), `approval_word`.
Model roles: "solver", "critic".
"""

from __future__ import annotations

import logging
from typing import Any

from mas import prompts
from mas.answers import end_critic_chat
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import int_option, str_option

SOLVER = "solver"
CRITIC = "critic"

# Agent Framework warns that a client without its tool-calling layer "might limit agent
# capabilities" (these agents use no tools) and logs the round cap being reached (a normal stop
# here); without a logging setup of the user's own these stay quiet.
for _name in ("agent_framework", "agent_framework_orchestrations"):
    logging.getLogger(_name).addHandler(logging.NullHandler())


@mas("agent_framework")
async def agent_framework_chat(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    # Imported here, so listing or running the other systems never builds a workflow.
    from agent_framework import Agent, AgentResponse, Message
    from agent_framework_orchestrations import GroupChatBuilder, GroupChatState

    from mas.agent_framework_client import EndpointAgentClient

    solver_turns = int_option(config, "max_solver_turns", 3)
    max_rounds = int_option(config, "max_rounds", 2 * solver_turns - 1)
    approval_word = str_option(config, "approval_word", "TERMINATE").strip()

    conversation = Conversation(models, task)
    answer_format = prompts.answer_format(task)
    solver = Agent(
        client=EndpointAgentClient(conversation, agent=SOLVER),
        name=SOLVER,
        description="Solves the problem step by step and corrects its solution.",
        instructions=prompts.AUTOGEN_SOLVER_SYSTEM.format(answer_format=answer_format),
    )
    critic = Agent(
        client=EndpointAgentClient(conversation, agent=CRITIC),
        name=CRITIC,
        description="Checks the solver's latest solution and approves it or names a mistake.",
        instructions=prompts.AUTOGEN_CRITIC_SYSTEM.format(approval_word=approval_word),
    )

    def next_speaker(state: GroupChatState) -> str:
        return (SOLVER, CRITIC)[state.current_round % 2]

    def critic_approved(chat: list[Message]) -> bool:
        last = chat[-1]
        return last.author_name == CRITIC and approval_word in last.text

    workflow = GroupChatBuilder(
        participants=[solver, critic],
        selection_func=next_speaker,
        termination_condition=critic_approved,
        max_rounds=max_rounds,
        output_from="all",  # every agent's reply is an output, then the orchestrator's last word
    ).build()
    result = await workflow.run(task.prompt)

    replies = [
        message
        for output in result.get_outputs()
        if isinstance(output, AgentResponse)
        for message in output.messages
        if message.author_name in (SOLVER, CRITIC)
    ]
    solver_texts = [message.text for message in replies if message.author_name == SOLVER]
    approved = bool(replies) and critic_approved(replies)
    transcript = conversation.transcript
    end_critic_chat(transcript, task, solver_texts, approved, "max_rounds")
    transcript.extra = {
        "chat_messages": len(replies),
        "max_rounds": max_rounds,
        "approval_word": approval_word,
    }
    return transcript
