"""A recipe's example sets: the shuffled training mix and the held-out evaluation positions."""

from __future__ import annotations

import random
from collections.abc import Sequence

from core.errors import MarsError
from games.spec import GameSpec, get_game
from train_backend.pretrain.format_data import (
    Example,
    arithmetic_examples,
    build_teachers,
    game_examples,
    reply_teacher_for,
    teachers_for,
)
from train_backend.pretrain.recipe import PretrainSettings
from train_backend.pretrain.relabel import relabelled
from train_backend.pretrain.teacher_replies import ReplySampler, ReplyTeacher

# Held-out positions come from games seeded far away from every training game.
EVAL_SEED_OFFSET = 1_000_000_007
ARITHMETIC_SEED_OFFSET = 7_919
COPY_SEED_OFFSET = 11  # small: a seed reaches OpenSpiel bots as a 32-bit integer


def check_games(names: Sequence[str]) -> list[GameSpec]:
    specs = [get_game(name) for name in names]  # MarsError for an unknown name
    if not specs:
        raise MarsError("give at least one game to pre-train on")
    return specs


def _split(total: int, weights: Sequence[float]) -> list[int]:
    """`total` cut into integer parts proportional to `weights` (largest remainders first)."""
    exact = [total * w / sum(weights) for w in weights]
    parts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: parts[i] - exact[i])
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


def restates(settings: PretrainSettings, spec: GameSpec) -> bool:
    """Whether this game's replies restate the seat's view before the answer (`reply_style`)."""
    if settings.reply_style == "restate_all":
        return True
    return settings.reply_style == "restate" and not spec.perfect_information


def training_examples(specs: Sequence[GameSpec], settings: PretrainSettings) -> list[Example]:
    """Game positions (both styles) plus a few arithmetic answers, shuffled with the seed."""
    arithmetic = round(settings.examples * settings.arithmetic_share)
    game_total = settings.examples - arithmetic
    full_total = round(game_total * settings.full_share)
    weights = [settings.game_weights.get(spec.name, 1.0) for spec in specs]
    compact_counts = _split(game_total - full_total, weights)
    full_counts = _split(full_total, weights)
    examples: list[Example] = []
    for index, spec in enumerate(specs):
        teachers = build_teachers(spec, settings.teachers.get(spec.name) or teachers_for(spec))
        reply_teacher = reply_teacher_for(spec, settings.reply_teacher)
        if reply_teacher is not None:
            teachers.append(reply_teacher)
        last_listed = (
            settings.last_listed_share
            if spec.perfect_information and reply_teacher is None
            else 0.0
        )
        for style, count, stream in (
            (settings.prompt_style, compact_counts[index], 0),
            ("full", full_counts[index], 1),
        ):
            if count:
                first_seed = (settings.seed * 4 + stream) * 10_000_000 + index * 1_000_000
                teacher = settings.reply_teachers.get(spec.name)
                sampler = None if teacher is None else ReplySampler(spec, teacher, first_seed)
                positions = game_examples(
                    spec,
                    style,
                    count=count,
                    first_seed=first_seed,
                    teachers=teachers,
                    per_episode=settings.per_episode,
                    last_listed_share=last_listed,
                    reply_teacher=reply_teacher,
                    balance=settings.balance if spec.perfect_information else 1,
                    max_seat_turns=settings.full_seat_turns if style == "full" else None,
                    restate=restates(settings, spec),
                    reply_sampler=sampler,
                )
                if style != "full" and settings.relabel_share:
                    positions = _some_relabelled(positions, settings.relabel_share, first_seed)
                examples += positions
    examples += arithmetic_examples(arithmetic, settings.seed + ARITHMETIC_SEED_OFFSET)
    random.Random(settings.seed).shuffle(examples)
    return examples


def copy_stage_examples(specs: Sequence[GameSpec], settings: PretrainSettings) -> list[Example]:
    """The copy stage's examples: compact positions of the recipe's games, every one relabelled,
    from other games (another seed) than the main stage's, each reply naming a uniformly random
    legal move (what is taught is reading the list, not a policy; no search a position)."""
    stage = settings.model_copy(
        update={
            "seed": settings.seed + COPY_SEED_OFFSET,
            "relabel_share": 1.0,
            "full_share": 0.0,
            "arithmetic_share": 0.0,
            "reply_teachers": {spec.name: ReplyTeacher(policy="random") for spec in specs},
        }
    )
    return training_examples(specs, stage)


def _some_relabelled(examples: list[Example], share: float, seed: int) -> list[Example]:
    rng = random.Random(f"relabel-{seed}")
    return [relabelled(e, rng) if rng.random() < share else e for e in examples]


def held_out_examples(specs: Sequence[GameSpec], settings: PretrainSettings) -> list[Example]:
    """Positions from random-vs-random games with seeds no training game uses."""
    examples: list[Example] = []
    for index, spec in enumerate(specs):
        teachers = build_teachers(spec, ["random"])
        for style, count in (
            (settings.prompt_style, settings.eval_positions),
            ("full", settings.eval_full_positions),
        ):
            if count:
                first_seed = EVAL_SEED_OFFSET + settings.seed * 100_000 + index * 10_000
                examples += game_examples(
                    spec,
                    style,
                    count=count,
                    first_seed=first_seed,
                    teachers=teachers,
                    per_episode=2,
                )
    if settings.arithmetic_share > 0 and settings.eval_positions:
        examples += arithmetic_examples(settings.eval_positions, EVAL_SEED_OFFSET + settings.seed)
    return examples
