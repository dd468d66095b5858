"""Obfuscated variants of the registered games: `kuhn_poker.v1` .. `kuhn_poker.v3`, and so on.

A variant is the same OpenSpiel game with the same parameters, split, deals and reward rules,
under a new title, rewritten rules, renamed seats, action labels mapped one to one onto new
names, and seat views whose symbols (cards, marks, colors, moves) are renamed. Everything is
derived from the variant's name, so every process builds the same variant. It is not registered:
`games.spec.get_game` builds it on first use (once per process, so specs stay singletons).
See docs/games.md (obfuscated variants).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from games.spec import GameSpec
from games.variants.board import connect_four_skin, tic_tac_toe_skin
from games.variants.hanabi import hanabi_skin
from games.variants.poker import kuhn_skin, leduc_skin
from games.variants.skin import Skin, derive
from games.variants.tools import Chooser

VARIANTS_PER_GAME = 3
_NAME = re.compile(r"(?P<base>.+)\.v(?P<number>[1-9]\d*)")

# One skin builder per registered game: a skin reads the catalog's own labels and views, so a
# game registered later has no variants until it has one.
SKINS: dict[str, Callable[[GameSpec, Chooser], Skin]] = {
    "tic_tac_toe": tic_tac_toe_skin,
    "connect_four": connect_four_skin,
    "kuhn_poker": kuhn_skin,
    "leduc_poker": leduc_skin,
    "mini_hanabi": hanabi_skin,
    "simple_hanabi": hanabi_skin,
}

_BUILT: dict[str, GameSpec] = {}


def variant_name(base: str, number: int) -> str:
    return f"{base}.v{number}"


def has_variants(spec: GameSpec) -> bool:
    return spec.variant_of is None and spec.name in SKINS


def variant(spec: GameSpec, number: int) -> GameSpec:
    """Variant `number` (1..VARIANTS_PER_GAME) of a registered game, built once per process."""
    if not has_variants(spec):
        raise ValueError(f"{spec.name} has no obfuscated variants")
    if not 1 <= number <= VARIANTS_PER_GAME:
        raise ValueError(f"variants are numbered 1 to {VARIANTS_PER_GAME}, not {number}")
    name = variant_name(spec.name, number)
    built = _BUILT.get(name)
    if built is None:
        skin = SKINS[spec.name](spec, Chooser(spec.name, number))
        built = _BUILT[name] = derive(spec, name, number, skin)
    return built


def find_variant(name: str, registry: Mapping[str, GameSpec]) -> GameSpec | None:
    """The variant a name such as `kuhn_poker.v2` stands for (None when it names none)."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    spec = registry.get(match["base"])
    number = int(match["number"])
    if spec is None or not has_variants(spec) or number > VARIANTS_PER_GAME:
        return None
    return variant(spec, number)


def variant_names(specs: Iterable[GameSpec]) -> list[str]:
    return [
        variant_name(spec.name, number)
        for spec in specs
        if has_variants(spec)
        for number in range(1, VARIANTS_PER_GAME + 1)
    ]


def list_variants(spec: GameSpec | None = None) -> list[GameSpec]:
    """Every variant of `spec`, or of every registered game."""
    from games.spec import get_game, list_games

    specs = [spec] if spec is not None else list_games()
    return [get_game(name) for name in variant_names(specs)]
