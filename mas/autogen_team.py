"""`autogen`: a solver and a critic as a real autogen-agentchat team.

Two `AssistantAgent`s take turns in a `RoundRobinGroupChat`: the solver answers, the critic checks
and either explains a mistake or approves by writing the approval word (default "TERMINATE"). The
chat ends when the critic approves (`TextMentionTermination` restricted to the critic's messages,
so the word in the task text or in the solver's reply never ends it) or when the message cap is
reached (`MaxMessageTermination`; the task message counts, so the default cap of 2 x
`max_solver_turns` = 6 messages is task, solver, critic, solver, critic, solver).

Both agents run on `EndpointChatClient`, so their calls go through the project's endpoint layer
and are recorded in the transcript under the agent names. The graded answer is the solver's last
message with a readable answer (else its last message).

Config: `max_solver_turns` (default 3), `max_messages` (overrides the cap), `approval_word`,
`protocol` ("default", or "maslab": MASLab's "AutoGen", a hand-written assistant / user-proxy
loop without the library, `mas.maslab.assistant_and_user_proxy`).
Model roles: "solver", "critic".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mas import maslab, prompts
from mas.answers import end_critic_chat
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import int_option, protocol_option, str_option

if TYPE_CHECKING:
    from mas.autogen_client import EndpointChatClient

SOLVER = "solver"
CRITIC = "critic"

# AutoGen logs every agent exception with a full traceback; the failure is already recorded with
# the sample, so without a logging setup of the user's own these stay quiet (no last-resort print).
logging.getLogger("autogen_core").addHandler(logging.NullHandler())


@mas("autogen")
async def autogen_team(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    if protocol_option(config, allowed=("max_turns", "termination_word")) == "maslab":
        return await maslab.assistant_and_user_proxy(task, models, config)
    # Imported here, so listing or running the other systems never loads autogen-agentchat.
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.messages import TextMessage
    from autogen_agentchat.teams import RoundRobinGroupChat

    from mas.autogen_client import EndpointChatClient

    solver_turns = int_option(config, "max_solver_turns", 3)
    max_messages = int_option(config, "max_messages", 2 * solver_turns, minimum=2)
    approval_word = str_option(config, "approval_word", "TERMINATE").strip()

    conversation = Conversation(models, task)
    clients = {
        name: EndpointChatClient(conversation, agent=name, model_role=name)
        for name in (SOLVER, CRITIC)
    }
    answer_format = prompts.answer_format(task)
    solver = AssistantAgent(
        SOLVER,
        model_client=clients[SOLVER],
        system_message=prompts.AUTOGEN_SOLVER_SYSTEM.format(answer_format=answer_format),
    )
    critic = AssistantAgent(
        CRITIC,
        model_client=clients[CRITIC],
        system_message=prompts.AUTOGEN_CRITIC_SYSTEM.format(approval_word=approval_word),
    )
    approval = TextMentionTermination(approval_word, sources=[CRITIC])
    cap = MaxMessageTermination(max_messages)
    team = RoundRobinGroupChat([solver, critic], termination_condition=approval | cap)
    try:
        result = await team.run(task=task.prompt)
    except Exception:
        _reraise_agent_failure(clients.values())
        raise
    _reraise_agent_failure(clients.values())

    chat = [message for message in result.messages if isinstance(message, TextMessage)]
    solver_texts = [message.content for message in chat if message.source == SOLVER]
    # The team resets its termination conditions when it stops, so approval is read off the chat.
    approved = bool(chat) and chat[-1].source == CRITIC and approval_word in chat[-1].content
    transcript = conversation.transcript
    end_critic_chat(transcript, task, solver_texts, approved, "max_messages")
    transcript.extra = {
        "autogen_stop_reason": result.stop_reason,
        "team_messages": len(chat),
        "max_messages": max_messages,
        "approval_word": approval_word,
    }
    return transcript


def _reraise_agent_failure(clients: Iterable[EndpointChatClient]) -> None:
    """AutoGen turns an agent's exception into a RuntimeError; raise the original instead."""
    for client in clients:
        if client.failure is not None:
            raise client.failure
