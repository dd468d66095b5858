"""What one episode produced: its turns and its outcome, and their JSON form for run records.

A turn is a plain typed dict (`Turn`) in the very shape it is recorded in, so 20,000 bot games
cost no conversion; model turns carry more keys than bot moves.
"""

from __future__ import annotations

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

    @property
    def invalid(self) -> bool:
        return self.invalid_seat is not None

    def seat_turns(self, seat: int) -> list[Turn]:
        return [t for t in self.turns if t["seat"] == seat]

    def to_record(self) -> dict[str, Any]:
        return {
            "schema_version": RECORD_SCHEMA_VERSION,
            "game": self.game,
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
