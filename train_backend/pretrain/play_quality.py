"""How a start model plays before any RL: its invalid replies and how varied its moves are.

For each game (an obfuscated variant is a game here too): compact (or numbered) prompts, as the
CPU trainer and the loop's step 0 send them, of positions from random-vs-random games whose seeds no
recipe trains on or evaluates its pre-training with. Each position gets `samples` replies at
`temperature` (self-play's sampling) and one greedy reply (the loop's arena default).

- invalid: a reply `games.parsing.parse_move` does not read as one of the position's legal
  moves, the arena's own rule (a forfeit there);
- entropy: per position, of the legal moves its sampled replies name (invalid ones left out),
  in bits, averaged over the positions with at least one; 0 for a policy that plays one fixed
  move per position. `uniform_bits` is the same average for a uniformly random legal move
  (log2 of the number of legal moves), the most any policy has.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from games.parsing import parse_move
from games.spec import get_game
from train_backend.pretrain.examples import EVAL_SEED_OFFSET
from train_backend.pretrain.format_data import Example, build_teachers, game_examples

QUALITY_SEED_OFFSET = EVAL_SEED_OFFSET + 500_000  # beside the pre-training's held-out games


@dataclass(frozen=True)
class GameQuality:
    game: str
    positions: int
    replies: int  # sampled, in all
    invalid_share: float  # of the sampled replies
    greedy_invalid_share: float  # of the greedy replies, one a position
    entropy_bits: float
    uniform_bits: float

    def as_dict(self) -> dict[str, Any]:
        return {key: round(v, 4) if isinstance(v, float) else v for key, v in asdict(self).items()}


def entropy_bits(moves: Sequence[str]) -> float:
    """The entropy of the moves' empirical distribution, in bits (0 for none or one kind)."""
    counts = Counter(moves)
    total = sum(counts.values())
    return -sum(n / total * math.log2(n / total) for n in counts.values()) if total else 0.0


def named_moves(
    replies: Sequence[str], legal: Sequence[str], numbered: bool = False
) -> list[str | None]:
    """The legal move each reply names, None for an invalid one."""
    moves = []
    for reply in replies:
        move = parse_move(reply, list(legal), numbered=numbered)
        moves.append(move.label if move.ok else None)
    return moves


def game_quality(
    game: str,
    legal: Sequence[Sequence[str]],
    sampled: Sequence[Sequence[str]],
    greedy: Sequence[str],
    numbered: bool = False,
) -> GameQuality:
    """A game's figures from each position's legal moves, sampled replies and greedy reply
    (`numbered`: the replies answer with numbers of the legal list)."""
    invalid = 0
    entropies: list[float] = []
    for labels, replies in zip(legal, sampled, strict=True):
        moves = named_moves(replies, labels, numbered)
        valid = [m for m in moves if m is not None]
        invalid += len(moves) - len(valid)
        if valid:
            entropies.append(entropy_bits(valid))
    greedy_invalid = sum(
        move is None
        for labels, reply in zip(legal, greedy, strict=True)
        for move in named_moves([reply], labels, numbered)
    )
    replies = sum(len(r) for r in sampled)
    return GameQuality(
        game=game,
        positions=len(legal),
        replies=replies,
        invalid_share=invalid / replies if replies else 0.0,
        greedy_invalid_share=greedy_invalid / len(greedy) if greedy else 0.0,
        entropy_bits=sum(entropies) / len(entropies) if entropies else 0.0,
        uniform_bits=sum(math.log2(len(labels)) for labels in legal) / len(legal) if legal else 0.0,
    )


def quality_positions(
    game: str, count: int, seed: int = 0, style: str = "compact"
) -> list[Example]:
    """`count` positions of `game` (`style` prompts) from random-vs-random games, two a game;
    a variant gets its original's positions (the same seeds: a paired comparison)."""
    spec = get_game(game)
    first_seed = QUALITY_SEED_OFFSET + seed * 100_000
    return game_examples(
        spec,
        style,
        count=count,
        first_seed=first_seed,
        teachers=build_teachers(spec, ["random"]),
        per_episode=2,
    )


def measure_start(
    model_dir: Path,
    games: Sequence[str],
    *,
    positions: int = 48,
    samples: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    seed: int = 0,
    style: str = "compact",
    on_game: Callable[[GameQuality], None] | None = None,
) -> list[GameQuality]:
    """Each game's figures for the model in `model_dir` (loaded in this process)."""
    import torch

    from train_backend.pretrain.build import load_model
    from train_backend.pretrain.format_eval import generate_replies

    model, tokenizer = load_model(model_dir)
    results = []
    for game in games:
        examples = quality_positions(game, positions, seed, style)
        chats = [e.messages for e in examples]
        torch.manual_seed(seed)
        flat = generate_replies(
            model,
            tokenizer,
            [chat for chat in chats for _ in range(samples)],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
        )
        greedy = generate_replies(model, tokenizer, chats, max_new_tokens=max_new_tokens)
        sampled = [flat[i * samples : (i + 1) * samples] for i in range(len(examples))]
        legal = [e.legal for e in examples]
        result = game_quality(game, legal, sampled, greedy, numbered=style == "numbered")
        if on_game is not None:
            on_game(result)
        results.append(result)
    return results
