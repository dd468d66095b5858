"""Players by name: random, mcts, minimax, tactics, cfr, nash, llm, self (games.players.base)."""

from games.players.base import (
    BotAgent,
    ModelAgent,
    Player,
    PlayerContext,
    known_players,
    make_player,
    needs_model,
    register_player,
)

__all__ = [
    "BotAgent",
    "ModelAgent",
    "Player",
    "PlayerContext",
    "known_players",
    "make_player",
    "needs_model",
    "register_player",
]
