"""Shared pieces of the MAS tests: which agent a request came from, and running a MAS against a
scripted server on 127.0.0.1."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from harness.testing.scripted_server import SeenRequest
from mas import prompts
from mas.base import Models

SYSTEM_PROMPT_ROLES = {
    prompts.MAD_AFFIRMATIVE_SYSTEM: "affirmative",
    prompts.MAD_NEGATIVE_SYSTEM: "negative",
    prompts.MAD_MODERATOR_SYSTEM: "moderator",
    prompts.MAD_JUDGE_SYSTEM: "judge",
    prompts.DEBATE_AGENT_SYSTEM: "debater",
    prompts.DEBATE_AGGREGATOR_SYSTEM: "aggregator",
}


def role_of(request: dict[str, Any]) -> str:
    """The agent a request belongs to, told by its system prompt."""
    system = request["messages"][0]["content"]
    if system in SYSTEM_PROMPT_ROLES:
        return SYSTEM_PROMPT_ROLES[system]
    if system.startswith("You are the solver"):
        return "solver"
    if system.startswith("You are the critic"):
        return "critic"
    raise AssertionError(f"unknown system prompt: {system[:60]!r}")


def endpoint(base_url: str, model: str = "scripted") -> Endpoint:
    return Endpoint(EndpointConfig(base_url=base_url, model=model, max_retries=0, timeout_s=20))


def models_for(base_url: str, **role_models: str) -> Models:
    """Default endpoint plus one endpoint per role, told apart by the model name they send."""
    return Models(
        default=endpoint(base_url),
        by_role={role: endpoint(base_url, model) for role, model in role_models.items()},
        gen=GenerationConfig(max_tokens=256),
    )


async def close(models: Models) -> None:
    for item in {id(e): e for e in (models.default, *models.by_role.values())}.values():
        await item.aclose()


def words(text: str) -> int:
    return len(text.split())


def server_usage_by_role(seen: list[SeenRequest]) -> dict[str, Counter[str]]:
    """What the scripted server billed per agent (it counts words, as its usage field does)."""
    usage: dict[str, Counter[str]] = defaultdict(Counter)
    for request in seen:
        role = role_of(request.body)
        usage[role]["calls"] += 1
        usage[role]["prompt_tokens"] += sum(
            words(str(m["content"])) for m in request.body["messages"]
        )
        usage[role]["completion_tokens"] += words(request.reply.text) + words(
            request.reply.reasoning or ""
        )
    return usage
