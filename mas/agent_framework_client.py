"""A Microsoft Agent Framework chat client over the project's endpoint layer.

`EndpointAgentClient` is a `agent_framework.BaseChatClient`, so Agent Framework agents (and the
orchestrations built from them) run on `Conversation.call` -> `Endpoint.complete`: their requests
share the endpoint's concurrency limit, retries, timeout, response cache and usage ledger, and
every call is recorded in the sample's transcript under the agent's name. Give each agent its own
client (a request does not say which agent sends it).

Agent Framework messages become plain chat messages: the agent's `instructions` as the system
message, the agent's own earlier replies as assistant turns without their reasoning, everything
else (the task, other agents' replies, labelled with the author: "critic: ...") as user turns;
consecutive user turns are merged, since some chat templates insist on alternating roles. Tools,
tool results, images and structured output are refused with `ValueError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, ClassVar

from agent_framework import (
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    Message,
    ResponseStream,
)

from core.endpoint import Completion, GenerationConfig
from core.endpoint import Message as ChatMessage
from mas.base import Conversation, add_turn

_GENERATION_FIELDS = frozenset(GenerationConfig.model_fields)
# Options an Agent sets on every request that mean nothing without tools or server-side storage.
_INERT_OPTIONS = {
    "tool_choice": {"auto", "none"},
    "allow_multiple_tool_calls": {True, False},
    "store": {False},
}
_IGNORED_OPTIONS = frozenset({"metadata", "user"})
_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter"})


class EndpointAgentClient(BaseChatClient):
    """One agent's chat client; its calls go through `conversation` as `agent`."""

    OTEL_PROVIDER_NAME: ClassVar[str] = "mars-endpoint"

    def __init__(
        self, conversation: Conversation, *, agent: str, model_role: str | None = None
    ) -> None:
        super().__init__()
        self._conversation = conversation
        self._agent = agent
        self._model_role = model_role or agent
        self._turns = 0

    @property
    def agent(self) -> str:
        return self._agent

    def service_url(self) -> str:
        return self._conversation.models.for_role(self._model_role).config.base_url

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        if stream:
            return self._build_response_stream(self._stream(messages, options))
        return self._respond(messages, options)

    async def _stream(
        self, messages: Sequence[Message], options: Mapping[str, Any]
    ) -> AsyncIterator[ChatResponseUpdate]:
        """No token streaming: the endpoint returns whole completions, sent as one update."""
        response = await self._respond(messages, options)
        for update in response.to_updates():
            yield update

    async def _respond(
        self, messages: Sequence[Message], options: Mapping[str, Any]
    ) -> ChatResponse:
        options = await self._validate_options(options)
        gen = self._generation(options)
        chat = to_chat_messages(messages, agent=self._agent)
        instructions = options.get("instructions")
        if instructions:
            chat.insert(0, {"role": "system", "content": str(instructions)})
        self._turns += 1
        completion = await self._conversation.call(
            self._agent, chat, model_role=self._model_role, round=self._turns, gen=gen
        )
        return self._response(completion)

    def _generation(self, options: Mapping[str, Any]) -> GenerationConfig:
        update: dict[str, Any] = {}
        for key, value in options.items():
            if value is None or key == "instructions" or key in _IGNORED_OPTIONS:
                continue
            if key in _GENERATION_FIELDS:
                update[key] = value
            elif _is_inert(key, value):
                continue
            elif key in {"tools", "tool_choice", "response_format"}:
                raise ValueError(f"{self._agent}: this chat client does not support {key}")
            else:
                # The endpoint sends standard fields only, and the role decides the model.
                raise ValueError(f"{self._agent}: unsupported chat option '{key}'")
        base = self._conversation.models.gen_for(self._agent)
        return base.model_copy(update=update) if update else base

    def _response(self, completion: Completion) -> ChatResponse:
        contents: list[Content] = []
        if completion.reasoning:
            contents.append(Content.from_text_reasoning(text=completion.reasoning))
        contents.append(Content.from_text(completion.text))
        usage = completion.usage
        details: dict[str, int] = {
            "input_token_count": usage.prompt_tokens,
            "output_token_count": usage.completion_tokens,
            "total_token_count": usage.prompt_tokens + usage.completion_tokens,
        }
        if usage.reasoning_tokens is not None:
            details["reasoning_output_token_count"] = usage.reasoning_tokens
        finish = completion.finish_reason
        endpoint = self._conversation.models.for_role(self._model_role)
        return ChatResponse(
            messages=[Message(role="assistant", contents=contents, author_name=self._agent)],
            model=endpoint.config.model,
            finish_reason=finish if finish in _FINISH_REASONS else None,  # type: ignore[arg-type]
            usage_details=details,  # type: ignore[arg-type]
            additional_properties={"cached": completion.cached, "retries": completion.retries},
        )


def _is_inert(key: str, value: Any) -> bool:
    return (key in _INERT_OPTIONS and value in _INERT_OPTIONS[key]) or (
        key == "tools" and not value
    )


def to_chat_messages(messages: Sequence[Message], *, agent: str) -> list[ChatMessage]:
    """Agent Framework messages as OpenAI chat messages, seen by `agent` (text only)."""
    chat: list[ChatMessage] = []
    for message in messages:
        text = _text_of(message)
        if message.role == "system":
            role, content = "system", text
        elif message.role == "assistant" and message.author_name in (None, agent):
            role, content = "assistant", text
        elif message.role in ("user", "assistant"):
            author = message.author_name
            role = "user"
            content = f"{author}: {text}" if author and author != "user" else text
        else:
            raise ValueError(f"this chat client does not support '{message.role}' messages")
        add_turn(chat, role, content)
    return chat


def _text_of(message: Message) -> str:
    parts: list[str] = []
    for content in message.contents:
        if content.type == "text":
            parts.append(content.text or "")
        elif content.type in ("text_reasoning", "usage"):
            continue  # reasoning stays with its author; usage is bookkeeping
        else:
            raise ValueError(f"this chat client does not support '{content.type}' content")
    return "\n".join(parts)
