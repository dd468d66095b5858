"""Model players: any model behind the endpoint layer (`llm`, `self`), or any async function.

`self` is the same model as `llm`, for the other seat: Hanabi and self-play put the model in both
seats (each seat keeps its own chat).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from games.episode import SEAT_NAMES
from games.players.base import ModelAgent, Player, PlayerContext, register_player
from harness.errors import MarsError

if TYPE_CHECKING:  # the openai client loads only when a model player is built
    from harness.endpoint import Completion, Endpoint, GenerationConfig


class EndpointAgent(ModelAgent):
    def __init__(self, endpoint: Endpoint, gen: GenerationConfig, role: str, epoch: int) -> None:
        self.endpoint = endpoint
        self.gen = gen
        self.role = role
        self.epoch = epoch

    async def respond(self, messages: list[dict[str, str]]) -> Completion:
        # The episode seed is the cache epoch: identical prompts in different episodes (every
        # game's first move) must not share one cached reply.
        return await self.endpoint.complete(
            messages, role=self.role, gen=self.gen, epoch=self.epoch
        )


class LLMPlayer(Player):
    is_model = True

    def __init__(self, endpoint: Endpoint, gen: GenerationConfig, name: str = "llm") -> None:
        self.endpoint = endpoint
        self.gen = gen
        self.name = name

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> EndpointAgent:
        return EndpointAgent(self.endpoint, self.gen, SEAT_NAMES[seat], seed)


Respond = Callable[[list[dict[str, str]], int, int], Awaitable["Completion"]]


class FunctionAgent(ModelAgent):
    def __init__(self, respond: Respond, seat: int, seed: int) -> None:
        self._respond = respond
        self.seat = seat
        self.seed = seed

    async def respond(self, messages: list[dict[str, str]]) -> Completion:
        return await self._respond(messages, self.seat, self.seed)


class FunctionPlayer(Player):
    """A model seat backed by `respond(messages, seat, seed)`: for in-process trainers and tests."""

    is_model = True

    def __init__(self, respond: Respond, name: str = "function") -> None:
        self._respond = respond
        self.name = name

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> FunctionAgent:
        return FunctionAgent(self._respond, seat, seed)


def _llm_from_context(name: str, argument: str | None, context: PlayerContext) -> Player:
    if argument:
        raise MarsError(f"player {name!r} takes no argument (got '{name}:{argument}')")
    if context.endpoint is None:
        raise MarsError(f"player {name!r} needs a model: give --model (and --base-url)")
    from harness.endpoint import GenerationConfig

    return LLMPlayer(context.endpoint, context.gen or GenerationConfig(), name=name)


@register_player("llm", "the model given by --model/--base-url", needs_model=True)
def _llm(argument: str | None, context: PlayerContext) -> Player:
    return _llm_from_context("llm", argument, context)


@register_player("self", "the same model in the other seat (Hanabi, self-play)", needs_model=True)
def _self(argument: str | None, context: PlayerContext) -> Player:
    return _llm_from_context("self", argument, context)
