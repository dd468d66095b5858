"""What every puzzle environment shares: the level, the outcome of a move list, the state's
interface, and the description of an environment (parameters, generator, rules)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from core.errors import MarsError
from core.names import unknown_name

Split = Literal["train", "eval"]
SPLITS: tuple[str, ...] = ("train", "eval")
ParamValue = int | float


@dataclass(frozen=True)
class Level:
    """One generated puzzle. `ref` names it in one line (`level_from_ref(level.ref) == level`);
    `solution` is certified: the optimal move list (Plan-Path, Sokoban) or the solved grid
    (Sudoku); `layout` is the environment's own description of the start."""

    env: str
    version: str
    split: str
    index: int
    params: Mapping[str, ParamValue]
    ref: str
    solution: tuple[Any, ...]
    optimal_length: int | None
    layout: Any

    def __hash__(self) -> int:  # params is a dict: hash by the name that identifies the level
        return hash(self.ref)


@dataclass(frozen=True)
class ListOutcome:
    """What applying one action list did: per-move rewards (moves after `done` are not applied
    and get none), how many moves were applied and how many of those were invalid."""

    reward: float
    rewards: tuple[float, ...]
    applied: int
    invalid: int
    done: bool
    solved: bool

    @classmethod
    def of(cls, rewards: list[float], invalid: int, state: PuzzleState) -> ListOutcome:
        """The outcome of the moves that earned `rewards`, `state` as they left it."""
        return cls(sum(rewards), tuple(rewards), len(rewards), invalid, state.done, state.solved)


class PuzzleState(ABC):
    """The state of one episode on a level. `apply` is the only way it changes."""

    level: Level
    done: bool
    solved: bool
    moves_taken: int

    @abstractmethod
    def copy(self) -> PuzzleState:
        """An independent copy: applying moves to it leaves this state as it is."""

    @abstractmethod
    def observation(self) -> str:
        """The current state as text (current position, boxes, filled cells)."""

    @abstractmethod
    def apply(self, actions: Sequence[Any]) -> ListOutcome:
        """Apply the moves in order with the reference's per-move rewards."""

    @abstractmethod
    def answer_text(self) -> str:
        """This state as a final answer (moves so far, or the current grid)."""


@dataclass(frozen=True)
class ParamSpec:
    """One generator parameter: its default and the closed range it must lie in."""

    default: ParamValue
    low: ParamValue
    high: ParamValue
    choices: tuple[ParamValue, ...] = ()  # when set, the only values allowed

    def check(self, env: str, name: str, value: object) -> ParamValue:
        integer = isinstance(self.default, int)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MarsError(f"{env}: parameter {name} must be a number, got {value!r}")
        if integer:
            if isinstance(value, float) and not value.is_integer():
                raise MarsError(f"{env}: parameter {name} must be a whole number, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        if self.choices and value not in self.choices:
            allowed = ", ".join(str(choice) for choice in self.choices)
            raise MarsError(f"{env}: parameter {name} must be one of {allowed}, got {value!r}")
        if not self.low <= value <= self.high:
            raise MarsError(
                f"{env}: parameter {name} must lie in [{self.low}, {self.high}], got {value!r}"
            )
        return value


@dataclass(frozen=True)
class Generated:
    """One generator attempt that succeeded: the layout, its certified solution and a text key
    that identifies its content (two levels with the same key are the same puzzle)."""

    layout: Any
    solution: tuple[Any, ...]
    optimal_length: int | None
    content_key: str


class PuzzleEnv(ABC):
    """An environment: its name, generator version, parameters, generator and rules."""

    name: str
    version: str
    params: ClassVar[Mapping[str, ParamSpec]]

    def check_params(self, given: Mapping[str, object]) -> dict[str, ParamValue]:
        """Every parameter (defaults filled in) in name order; MarsError on an unknown name or
        a bad value."""
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            raise MarsError(
                f"{self.name}: " + unknown_name("parameter", ", ".join(unknown), self.params)
            )
        checked = {
            name: spec.check(self.name, name, given.get(name, spec.default))
            for name, spec in self.params.items()
        }
        return dict(sorted(checked.items()))

    @abstractmethod
    def generate(self, rng: random.Random, params: Mapping[str, Any]) -> Generated | None:
        """One attempt from `rng`; None when it produced no certified level."""

    @abstractmethod
    def new_state(self, level: Level) -> PuzzleState:
        """A fresh episode on `level`."""

    @abstractmethod
    def rules_text(self, level: Level) -> str:
        """The task for an agent: rules, symbols, the action format."""
