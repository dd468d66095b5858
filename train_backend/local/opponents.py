"""Fixed opponents for training (`mars train --opponent SPEC`), the MARSHAL code's second mode.

Instead of self-play, the policy plays every game against a fixed player: any arena bot that needs
no model (`random`, `mcts:N`, `cfr:N`, `tactics`, ...) or `checkpoint:PATH`, a frozen model folder
played in process. Only the policy's turns are trained. The policy's seat alternates by episode
seed; in the dealt games (Kuhn, Leduc) it alternates by block of deals, so each seat meets every
deal equally often.

`pool` is fictitious self-play: the opponent is one of the policy's own past snapshots, drawn
anew every step (`OpponentPool`), so the policy keeps facing the strategies it has left behind
and cannot win by exploiting only its current self.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from games.players import PlayerContext, make_player, needs_model
from games.players.base import Player
from games.spec import GameSpec

if TYPE_CHECKING:
    from core.causal_lm import Policy

CHECKPOINT_PREFIX = "checkpoint:"
POOL = "pool"


@dataclass(frozen=True)
class FixedOpponent:
    """What `--opponent` names: bots per game, or a frozen model."""

    name: str
    bots: dict[str, Player]  # game -> bot (empty for a checkpoint opponent)
    model_path: Path | None = None  # `checkpoint:PATH`
    pool: bool = False  # `pool`: the policy's own past snapshots (OpponentPool)


def policy_seat(spec: GameSpec, seed: int) -> int:
    """The seat the policy takes in the episode with this seed (the opponent takes the other)."""
    block = seed // spec.deal_count if spec.deal_radices else seed
    return block % 2


def make_fixed_opponent(name: str, specs: Sequence[GameSpec]) -> FixedOpponent:
    """Build the opponent for every game now, so a bad name fails before training starts."""
    text = name.strip()
    if text.lower() == POOL:
        return FixedOpponent(name=POOL, bots={}, pool=True)
    if text.lower().startswith(CHECKPOINT_PREFIX):
        path = Path(text[len(CHECKPOINT_PREFIX) :]).expanduser()
        if not (path / "config.json").is_file():
            raise MarsError(f"--opponent {name!r}: {path} is not a model folder (no config.json)")
        return FixedOpponent(name=text, bots={}, model_path=path)
    if needs_model(text):
        raise MarsError(
            f"--opponent {name!r} is the policy itself: leave --opponent out for self-play, "
            "or give a bot (random, mcts:N, cfr:N, ...) or checkpoint:PATH"
        )
    bots = {spec.name: make_player(text, PlayerContext(spec=spec)) for spec in specs}
    return FixedOpponent(name=text, bots=bots)


def load_opponent_policy(opponent: FixedOpponent, start: str | Path) -> Policy | None:
    """The frozen model of a `checkpoint:PATH` opponent (None for bots). A pool's model is a
    copy of the starting model (`start`) whose weights each step's snapshot replaces."""
    if opponent.model_path is None and not opponent.pool:
        return None
    from core.causal_lm import load_policy

    policy = load_policy(
        opponent.model_path or start
    )  # MarsError naming the folder if it is no model
    policy.model.requires_grad_(False)
    policy.model.eval()
    return policy


class OpponentPool:
    """The policy's past snapshots (weights on the CPU), newest `size` kept, one drawn per step
    from a generator seeded by (run seed, step), so a resumed step draws the same one."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.snapshots: list[tuple[int, dict[str, Any]]] = []  # (step taken, state dict)

    def add(self, step: int, model: Any) -> None:
        state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
        self.snapshots = [*self.snapshots, (step, state)][-self.size :]

    def draw(self, step: int) -> tuple[int, dict[str, Any]]:
        index = random.Random(self.seed * 1_000_003 + step).randrange(len(self.snapshots))
        return self.snapshots[index]
