"""Players: what sits in a seat. Registered by name and built from strings like `mcts:200`.

A `Player` is built once per arena (from the player string) and hands out one agent per episode
and seat, giving it that seat's RNG. Two kinds of agent exist:
- `BotAgent.choose(state) -> action`: classic bots; synchronous, never shown a prompt;
- `ModelAgent.respond(messages) -> Completion`: models; the engine renders prompts for them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyspiel

from core.errors import MarsError
from core.names import closest

if TYPE_CHECKING:
    from core.endpoint import Completion, Endpoint, GenerationConfig
    from games.spec import GameSpec


class BotAgent(ABC):
    __slots__ = ()

    @abstractmethod
    def choose(self, state: pyspiel.State) -> int:
        """A legal action for the current player of `state`."""


class ModelAgent(ABC):
    @abstractmethod
    async def respond(self, messages: list[dict[str, str]]) -> Completion:
        """The model's reply to the chat; raises EndpointError if the call fails for good."""


Agent = BotAgent | ModelAgent


class Player(ABC):
    name: str  # the player string it was built from, e.g. "mcts:200"
    is_model: bool = False

    @property
    def identity(self) -> str:
        """Who plays, for ratings across runs: the bot string, or the model behind a model
        player (its folder or served name), since `llm` alone names no model."""
        return self.name

    @abstractmethod
    def agent(self, *, seat: int, rng: random.Random, seed: int) -> Agent:
        """The agent playing `seat` in the episode with this `seed`."""

    def action_probabilities(self, state: pyspiel.State) -> dict[int, float] | None:
        """The exact distribution the player draws its move from at `state`, if it has one
        (exploitability uses it instead of sampling); None for players without one."""
        return None


@dataclass(frozen=True)
class PlayerContext:
    """What player factories may need besides their argument."""

    spec: GameSpec
    endpoint: Endpoint | None = None  # the model of `llm` and `self` (--model/--base-url)
    gen: GenerationConfig | None = None
    cache_dir: Path | None = None
    model_label: str | None = None  # who `llm`/`self` is in records (default: the endpoint's model)
    # `llm:SPEC` seats: SPEC as written -> (its own endpoint, the label records give it).
    named_models: Mapping[str, tuple[Endpoint, str]] = field(default_factory=dict)


PlayerFactory = Callable[[str | None, PlayerContext], Player]
_FACTORIES: dict[str, PlayerFactory] = {}
_USAGE: dict[str, str] = {}
_NEEDS_MODEL: set[str] = set()


def register_player(
    name: str, usage: str, *, needs_model: bool = False
) -> Callable[[PlayerFactory], PlayerFactory]:
    def decorate(factory: PlayerFactory) -> PlayerFactory:
        _FACTORIES[name] = factory
        _USAGE[name] = usage
        if needs_model:
            _NEEDS_MODEL.add(name)
        return factory

    return decorate


def _split(text: str) -> tuple[str, str | None]:
    name, _, argument = text.strip().partition(":")
    return name.strip().lower(), (argument.strip() or None)


def needs_model(text: str) -> bool:
    """Whether the player string names a model player (so a model endpoint must be set up)."""
    _load_builtin_players()
    return _split(text)[0] in _NEEDS_MODEL


def positive_int_argument(player: str, argument: str | None, default: int | None) -> int:
    if argument is None or argument == "":
        if default is None:
            raise MarsError(f"player {player!r} needs a number, e.g. {player}:100")
        return default
    try:
        value = int(argument)
    except ValueError:
        message = f"player '{player}:{argument}': {argument!r} is not a whole number"
        raise MarsError(message) from None
    if value <= 0:
        raise MarsError(f"player '{player}:{argument}': the number must be positive")
    return value


def known_players() -> dict[str, str]:
    _load_builtin_players()
    return dict(_USAGE)


def _load_builtin_players() -> None:
    from games.players import classic, llm, minimax, solvers, tactics  # noqa: F401


def make_player(text: str, context: PlayerContext) -> Player:
    """Build a player from its string: `random`, `mcts:200`, `cfr:1000`, `nash`, `llm`, `self`."""
    _load_builtin_players()
    name, argument = _split(text)
    if name not in _FACTORIES:
        options = ", ".join(f"{n} ({u})" for n, u in sorted(_USAGE.items()))
        guesses = closest(name, _FACTORIES)
        hint = f" (did you mean {' or '.join(repr(g) for g in guesses)}?)" if guesses else ""
        raise MarsError(f"unknown player {text!r}{hint}; known players: {options}")
    return _FACTORIES[name](argument, context)
