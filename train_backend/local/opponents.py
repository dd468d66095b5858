"""Fixed opponents for training (`mars train --opponent SPEC`), the MARSHAL code's second mode.

Instead of self-play, the policy plays every game against a fixed player: any arena bot that needs
no model (`random`, `mcts:N`, `cfr:N`, `tactics`, ...) or `checkpoint:PATH`, a frozen model folder
played in process. Only the policy's turns are trained. The policy's seat alternates by episode
seed; in the dealt games (Kuhn, Leduc) it alternates by block of deals, so each seat meets every
deal equally often.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from games.players import PlayerContext, make_player, needs_model
from games.players.base import Player
from games.spec import GameSpec
from harness.errors import MarsError

if TYPE_CHECKING:
    from train_backend.local.policy import Policy

CHECKPOINT_PREFIX = "checkpoint:"


@dataclass(frozen=True)
class FixedOpponent:
    """What `--opponent` names: bots per game, or a frozen model."""

    name: str
    bots: dict[str, Player]  # game -> bot (empty for a checkpoint opponent)
    model_path: Path | None = None  # `checkpoint:PATH`


def policy_seat(spec: GameSpec, seed: int) -> int:
    """The seat the policy takes in the episode with this seed (the opponent takes the other)."""
    block = seed // spec.deal_count if spec.deal_radices else seed
    return block % 2


def make_fixed_opponent(name: str, specs: Sequence[GameSpec]) -> FixedOpponent:
    """Build the opponent for every game now, so a bad name fails before training starts."""
    text = name.strip()
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


def load_opponent_policy(opponent: FixedOpponent) -> Policy | None:
    """The frozen model of a `checkpoint:PATH` opponent (None for bots)."""
    if opponent.model_path is None:
        return None
    from train_backend.local.policy import load_policy

    policy = load_policy(opponent.model_path)  # MarsError naming the folder if it is no model
    policy.model.requires_grad_(False)
    policy.model.eval()
    return policy
