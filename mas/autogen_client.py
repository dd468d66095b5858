"""An AutoGen model client over the project's endpoint layer.

`EndpointChatClient` implements `autogen_core.models.ChatCompletionClient`, so autogen-agentchat
agents run on `Conversation.call` -> `Endpoint.complete`: their requests share the endpoint's
concurrency limit, retries, timeout, response cache and usage ledger, and every call is recorded
in the sample's transcript under the AutoGen agent's name. Give each agent its own client (the
interface does not tell a client which agent is calling).

AutoGen messages become plain chat messages: the system message as is, other agents' messages as
user turns labelled with the sender ("critic: ..."), the agent's own earlier replies as assistant
turns without their reasoning; consecutive user turns are merged, since some chat templates insist
on alternating roles. Tools, images, JSON mode and structured output are refused (model_info says
so, and AutoGen checks it before asking).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal

from autogen_core import CancellationToken
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelCapabilities,
    ModelFamily,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel

from core.endpoint import GenerationConfig, Message
from core.errors import EndpointError
from mas.base import Conversation, add_turn

MODEL_INFO: ModelInfo = {
    "vision": False,
    "function_calling": False,
    "json_output": False,
    "family": ModelFamily.UNKNOWN,
    "structured_output": False,
    "multiple_system_messages": False,
}
_GENERATION_FIELDS = frozenset(GenerationConfig.model_fields)
_FINISH_REASONS = {"stop", "length", "function_calls", "content_filter"}
_CHARS_PER_TOKEN = 4  # count_tokens is an estimate: an arbitrary endpoint exposes no tokenizer


class EndpointChatClient(ChatCompletionClient):
    """One AutoGen agent's model client; calls go through `conversation` as `agent`."""

    def __init__(
        self,
        conversation: Conversation,
        *,
        agent: str,
        model_role: str | None = None,
        context_tokens: int = 32768,
    ) -> None:
        self._conversation = conversation
        self._agent = agent
        self._model_role = model_role or agent
        self._context_tokens = context_tokens
        self._turns = 0
        self._total = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._actual = RequestUsage(prompt_tokens=0, completion_tokens=0)
        # AutoGen reports an agent's exception as a RuntimeError carrying only its text; the
        # original is kept here so the MAS can re-raise it (an EndpointError marks the sample as
        # errored and retried on resume, not as a wrong answer).
        self.failure: BaseException | None = None

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        if tools:
            raise ValueError(f"{self._agent}: this model client does not support tools")
        if json_output:
            raise ValueError(f"{self._agent}: this model client does not support JSON output")
        gen = self._generation(extra_create_args)
        self._turns += 1
        call = asyncio.ensure_future(
            self._conversation.call(
                self._agent,
                to_chat_messages(messages),
                model_role=self._model_role,
                round=self._turns,
                gen=gen,
            )
        )
        if cancellation_token is not None:
            cancellation_token.link_future(call)
        try:
            completion = await call
        except EndpointError as exc:
            self.failure = exc
            raise
        usage = RequestUsage(
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
        )
        self._total = _add(self._total, usage)
        if not completion.cached:
            self._actual = _add(self._actual, usage)
        finish = completion.finish_reason if completion.finish_reason in _FINISH_REASONS else None
        return CreateResult(
            finish_reason=finish or "unknown",  # type: ignore[arg-type]
            content=completion.text,
            usage=usage,
            cached=completion.cached,
            thought=completion.reasoning or None,
        )

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        """No token streaming: the endpoint layer returns whole completions; yields the result."""
        yield await self.create(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            json_output=json_output,
            extra_create_args=extra_create_args,
            cancellation_token=cancellation_token,
        )

    def _generation(self, extra: Mapping[str, Any]) -> GenerationConfig:
        base = self._conversation.models.gen_for(self._agent)
        if not extra:
            return base
        unknown = set(extra) - _GENERATION_FIELDS
        if unknown:
            # The endpoint sends standard fields only (some servers reject anything else).
            raise ValueError(f"{self._agent}: unsupported create arguments {sorted(unknown)}")
        return base.model_copy(update=dict(extra))

    async def close(self) -> None:
        """Nothing to release: the endpoints belong to the caller of the MAS."""

    def actual_usage(self) -> RequestUsage:
        """Tokens of calls the server actually answered (cache hits excluded)."""
        return self._actual

    def total_usage(self) -> RequestUsage:
        """Tokens of all calls, cache hits included."""
        return self._total

    def count_tokens(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
    ) -> int:
        """An estimate (about four characters a token, plus a few per message)."""
        chat = to_chat_messages(messages) if messages else []
        return sum(4 + len(message["content"]) // _CHARS_PER_TOKEN for message in chat)

    def remaining_tokens(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
    ) -> int:
        return self._context_tokens - self.count_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> ModelCapabilities:
        return {"vision": False, "function_calling": False, "json_output": False}

    @property
    def model_info(self) -> ModelInfo:
        return MODEL_INFO


def _add(left: RequestUsage, right: RequestUsage) -> RequestUsage:
    return RequestUsage(
        prompt_tokens=left.prompt_tokens + right.prompt_tokens,
        completion_tokens=left.completion_tokens + right.completion_tokens,
    )


def to_chat_messages(messages: Sequence[LLMMessage]) -> list[Message]:
    """AutoGen's LLM messages as OpenAI chat messages (text only)."""
    chat: list[Message] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            role, content = "system", message.content
        elif isinstance(message, UserMessage):
            role, content = "user", _text_of(message.content)
            if message.source != "user":
                content = f"{message.source}: {content}"
        elif isinstance(message, AssistantMessage):
            if not isinstance(message.content, str):
                raise ValueError("this model client does not support function calls")
            role, content = "assistant", message.content
        elif isinstance(message, FunctionExecutionResultMessage):
            raise ValueError("this model client does not support function results")
        else:  # pragma: no cover - the LLMMessage union is closed
            raise ValueError(f"unsupported message type {type(message).__name__}")
        add_turn(chat, role, content)
    return chat


def _text_of(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    if all(isinstance(part, str) for part in content):
        return "\n".join(content)
    raise ValueError("this model client does not support images")
