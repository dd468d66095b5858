"""Model players: any model behind the endpoint layer (`llm`, `self`, `llm:SPEC`), or any async
function.

`self` is the same model as `llm`, for the other seat: Hanabi and self-play put the model in both
seats (each seat keeps its own chat). `llm:SPEC` is another model with its own endpoint, so two
checkpoints can play each other (`parse_model_spec` gives the syntax).
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import MarsError
from games.episode import SEAT_NAMES
from games.players.base import ModelAgent, Player, PlayerContext, register_player

if TYPE_CHECKING:  # the openai client loads only when a model player is built
    from core.endpoint import Completion, Endpoint, GenerationConfig


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

    def __init__(
        self,
        endpoint: Endpoint,
        gen: GenerationConfig,
        name: str = "llm",
        label: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.gen = gen
        self.name = name
        self.label = label or endpoint.config.model

    @property
    def identity(self) -> str:
        return self.label

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


_AT_URL = re.compile(r"(?P<name>.+)@(?P<url>https?://\S+)")


@dataclass(frozen=True)
class ModelSpec:
    """Where the model of an `llm:SPEC` seat comes from.

    `llm:NAME@URL`: the model NAME at the OpenAI-compatible URL (e.g.
    `llm:Qwen3-4B@http://gpu:8000/v1`); the split is at the last `@` followed by http:// or
    https://. Anything else, `llm:PATH`, is a checkpoint folder or hub id served for the command
    like `--model` (e.g. `llm:runs/train-x/checkpoints/step_20`).
    """

    model: str
    base_url: str | None = None

    @property
    def label(self) -> str:
        """Who the seat is in records: the served name at a URL, else the folder's absolute path
        (the same for every spelling of the path) or the hub id."""
        if self.base_url:
            return self.model
        from core.server_commands import model_argument

        return model_argument(self.model)


def parse_model_spec(text: str) -> ModelSpec:
    """The SPEC of `llm:SPEC` (without the `llm:`): `PATH` or `NAME@URL`."""
    spec = text.strip()
    if not spec:
        raise MarsError("player 'llm:' needs a model: llm:PATH or llm:NAME@URL")
    if match := _AT_URL.fullmatch(spec):
        name, url = match.group("name").strip(), match.group("url").rstrip("/")
        if not name:
            raise MarsError(f"player 'llm:{spec}': the model name before @ is empty")
        return ModelSpec(model=name, base_url=url)
    if "@" in spec and "://" in spec:
        raise MarsError(f"player 'llm:{spec}': write llm:NAME@http://HOST:PORT/v1")
    return ModelSpec(model=spec)


def named_models(players: list[str]) -> dict[str, ModelSpec]:
    """SPEC -> its ModelSpec for every `llm:SPEC` among the player strings (one per distinct
    SPEC: the same model on both seats is served once)."""
    found: dict[str, ModelSpec] = {}
    for player in players:
        name, _, argument = player.strip().partition(":")
        argument = argument.strip()
        if name.strip().lower() == "llm" and argument and argument not in found:
            found[argument] = parse_model_spec(argument)
    return found


def _llm_from_context(name: str, argument: str | None, context: PlayerContext) -> Player:
    if argument:
        raise MarsError(f"player {name!r} takes no argument (got '{name}:{argument}')")
    if context.endpoint is None:
        raise MarsError(f"player {name!r} needs a model: give --model (and --base-url)")
    from core.endpoint import GenerationConfig

    gen = context.gen or GenerationConfig()
    return LLMPlayer(context.endpoint, gen, name=name, label=context.model_label)


@register_player(
    "llm",
    "the model given by --model/--base-url; llm:PATH or llm:NAME@URL another model",
    needs_model=True,
)
def _llm(argument: str | None, context: PlayerContext) -> Player:
    if argument is None:
        return _llm_from_context("llm", argument, context)
    parse_model_spec(argument)  # a malformed spec is reported as such
    if argument not in context.named_models:
        raise MarsError(f"player 'llm:{argument}' has no endpoint set up for its model")
    from core.endpoint import GenerationConfig

    endpoint, label = context.named_models[argument]
    gen = context.gen or GenerationConfig()
    return LLMPlayer(endpoint, gen, name=f"llm:{argument}", label=label)


@register_player("self", "the same model in the other seat (Hanabi, self-play)", needs_model=True)
def _self(argument: str | None, context: PlayerContext) -> Player:
    return _llm_from_context("self", argument, context)
