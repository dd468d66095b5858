"""What one episode produced: its turns and its outcome, and their JSON form for run records.

A turn is a plain typed dict (`Turn`) in the very shape it is recorded in, so 20,000 bot games
cost no conversion; model turns carry more keys than bot moves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

Outcome = Literal["win", "draw", "loss"]
Message = dict[str, str]
SEAT_NAMES: tuple[str, str] = ("first", "second")
RECORD_SCHEMA_VERSION = 1


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int | None


class Turn(TypedDict, total=False):
    """One decision: a bot's move, or one model call (a re-ask in retry mode is its own turn)."""

    seat: int
    turn: int  # index of this turn among the seat's turns, from 0
    action: str | None  # the legal label played (None: the reply was invalid)
    legal: bool
    reward: float
    # Model turns only:
    step: int  # how many actions the game had seen before this turn
    prompt: list[Message]  # the messages this turn added to the seat's chat
    context_len: int  # how many earlier messages of the chat came before `prompt`
    reply: str
    reasoning: str
    finish_reason: str | None
    usage: Usage
    attempt: int  # 0 for the first ask; k for the k-th re-ask after an invalid reply
    error: str | None  # why the reply was invalid
    retried: bool  # invalid, but the seat was asked again
    messages: list[Message]  # in memory only, not recorded: the whole chat that was sent


class BotMove(dict):
    """A classic bot's move as recorded: seat, turn, action, legal (True) and reward.

    A bot arena plays millions of moves but only a few hundred distinct ones, so each distinct
    move is made once (`bot_move`) and shared by every record that has it, with its JSON line
    fragment made once too. Shared values must not change: every mutating method raises, and a
    copy is an ordinary dict.
    """

    __slots__ = ("json",)

    def __init__(self, seat: int, turn: int, action: str, reward: float) -> None:
        super().__init__(seat=seat, turn=turn, action=action, legal=True, reward=reward)
        self.json = json.dumps(self, ensure_ascii=False)

    def _immutable(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a bot move is shared between records and cannot change; copy it first")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _immutable
    __ior__ = _immutable

    def __reduce__(self) -> tuple[Any, ...]:
        return (bot_move, (self["seat"], self["turn"], self["action"], self["reward"]))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return dict(self)


_BOT_MOVE_LIMIT = 100_000  # distinct moves kept (each a few hundred bytes)
_bot_moves: dict[tuple[Any, ...], BotMove] = {}


def bot_move(seat: int, turn: int, action: str, reward: float) -> Turn:
    """The shared `BotMove` with these values. Equal keys must mean equal JSON, and 1 == 1.0
    == True and 0.0 == -0.0 as keys, so the reward's type and sign are part of the key."""
    key = (seat, turn, action, reward, type(reward), reward == 0 and str(reward))
    move = _bot_moves.get(key)
    if move is None:
        if type(seat) is not int or type(turn) is not int or type(action) is not str:
            raise TypeError(f"a bot move needs int seat and turn and a str action, not {key[:3]}")
        if len(_bot_moves) >= _BOT_MOVE_LIMIT:
            _bot_moves.clear()
        move = _bot_moves[key] = BotMove(seat, turn, action, reward)
    return move  # type: ignore[return-value]


def is_model_turn(turn: Turn) -> bool:
    return "usage" in turn


def record_turn(turn: Turn) -> Turn:
    if "messages" not in turn:
        return turn
    return {k: v for k, v in turn.items() if k != "messages"}  # type: ignore[return-value]


@dataclass(slots=True)
class EpisodeResult:
    game: str
    seed: int
    players: tuple[str, ...]
    turns: list[Turn] = field(default_factory=list)
    # Game-scale result per seat (OpenSpiel returns; a forfeit on an invalid move, see rewards).
    returns: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # per seat, the sum of its turn rewards
    outcomes: list[Outcome] | None = None
    invalid_seat: int | None = None
    truncated: bool = False  # stopped at the action cap
    num_actions: int = 0
    error: str | None = None  # a model call failed for good; the episode is incomplete
    # Per seat, over model turns only; a shared (0, 0) until a model turn is counted.
    model_turns: Sequence[int] = (0, 0)
    invalid_turns: Sequence[int] = (0, 0)
    completion_tokens: Sequence[int] = (0, 0)
    variant_of: str | None = None  # the original game when `game` is an obfuscated variant

    @property
    def invalid(self) -> bool:
        return self.invalid_seat is not None

    def seat_turns(self, seat: int) -> list[Turn]:
        return [t for t in self.turns if t["seat"] == seat]

    def to_record(self, **extra: Any) -> dict[str, Any]:
        """The record of this episode, with `extra` fields (the arena's seat and players) before
        the turns. A variant's record also names its original (`variant_of`)."""
        variant = {"variant_of": self.variant_of} if self.variant_of else {}
        return {
            "schema_version": RECORD_SCHEMA_VERSION,
            "game": self.game,
            **variant,
            "seed": self.seed,
            "players": list(self.players),
            "returns": self.returns,
            "rewards": self.rewards,
            "outcomes": self.outcomes,
            "invalid": self.invalid_seat is not None,
            "invalid_seat": self.invalid_seat,
            "truncated": self.truncated,
            "num_actions": self.num_actions,
            "model_turns": self.model_turns,
            "invalid_turns": self.invalid_turns,
            "completion_tokens": self.completion_tokens,
            "error": self.error,
            **extra,
            "turns": [record_turn(t) for t in self.turns] if any(self.model_turns) else self.turns,
        }


def conversation(turns: list[Turn]) -> list[Message]:
    """Rebuild the whole chat one seat had, from that seat's (model) turns in order.

    Records keep only the messages each turn added (`prompt`, after `context_len` earlier ones);
    a turn that started a fresh prompt (compact style) restarts the chat.
    """
    chat: list[Message] = []
    for turn in turns:
        if "prompt" not in turn:
            continue
        chat = chat[: turn["context_len"]] + list(turn["prompt"])
        chat.append({"role": "assistant", "content": turn.get("reply") or ""})
    return chat
