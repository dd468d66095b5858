"""Game specs: everything the game layer needs to know about one OpenSpiel game, as data.

A spec names the OpenSpiel game and its parameters, says whether it is a training or a held-out
game, how its actions are written for a model, how a seat's view is rendered, and which reward
rules apply, and how a replay draws its board (`Board`). The arena, self-play, the CPU trainer,
the verl agent loop and the dashboard's replays all read the same spec, so adding an OpenSpiel game
is one module in games/catalog/ that registers its spec and one line naming that module in
`games.catalog.MODULES` (docs/games.md, "Adding a game"; tests/test_extension_points.py).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyspiel

from core.errors import MarsError
from core.names import unknown_name

Split = Literal["train", "heldout"]
# Which invalid-move penalty applies: -1-10 (board), -own bet-10 (bet), -current score-10 (score).
PenaltyKind = Literal["board", "bet", "score"]


@dataclass(frozen=True)
class RewardRules:
    """Per-turn reward shaping (see docs/games.md for the numbers and why)."""

    penalty_kind: PenaltyKind
    invalid_extra: float = 10.0  # added on top of the forfeited outcome: -1-10, -bet-10, -score-10
    format_bonus: float = 0.05  # every turn whose reply parsed to a legal action
    draw_reward: float | None = None  # board games: a drawn game (return 0) pays this to both seats
    length_threshold: int = 2048  # completion tokens a turn may use before the length penalty
    length_penalty_per_token: float = 0.1 / 2048  # -0.1 per 2048 tokens over the threshold...
    length_penalty_cap: float = 0.5  # ...but never more than -0.5 per turn
    max_actions: int = 50  # both seats counted; the game stops there (see engine)
    # Per-step rewards (turn_rewards="step"): what a terminal step's zero reward pays instead, as
    # the MARSHAL code's board-game and Hanabi environments do (None: it stays 0, as in poker).
    step_terminal_zero: float | None = None


@dataclass(frozen=True)
class SeatView:
    """What one seat may know, rendered as text; built only from that seat's own strings."""

    state: str  # the full description (prompt style `full`)
    compact: str  # a one- or few-line description (prompt style `compact`)


# Renders the view of `seat` of a (non-chance, non-terminal or terminal) state.
ViewFn = Callable[[pyspiel.State, int], SeatView]
# How much `seat` has put into the pot so far (poker penalties).
BetFn = Callable[[pyspiel.State, int], float]
# Turns OpenSpiel's action string for (seat, action) into the label shown to a model.
LabelFn = Callable[[str, int, int], str]
# Reads the fields of a board kind from a state, as a spectator sees it (every hidden card).
BoardReadFn = Callable[["GameSpec", pyspiel.State], dict[str, Any]]
# The board kinds the dashboard draws (dashboard/boards.py); games/positions.py lists each one's
# fields. `text` is OpenSpiel's own state string, the drawing of a game that declares no board.
BoardKind = Literal["grid", "poker", "hanabi", "text"]


@dataclass(frozen=True)
class Board:
    """How a replay draws the game: a board kind the dashboard knows, the function that reads a
    position's fields of that kind from a state (`games.positions`), and the drawing's options
    (`style`, carried in every position: a grid's `pieces` "marks" or "discs", poker's
    `public_card`). A game without one is drawn as OpenSpiel's state string."""

    kind: BoardKind
    read: BoardReadFn
    style: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)  # identity hash: specs are singletons in the registry
class GameSpec:
    name: str  # registry name, e.g. "kuhn_poker"
    title: str  # human name, e.g. "Kuhn Poker"
    openspiel_name: str
    params: Mapping[str, Any]
    split: Split
    rules: str  # full rules text for prompt style `full`
    compact_rules: str  # one or two sentences for prompt style `compact`
    seat_names: tuple[str, str]  # how the rules call the seats, e.g. ("X", "O")
    label: LabelFn
    view: ViewFn
    rewards: RewardRules
    cooperative: bool = False
    # Mixed-radix sizes of the chance nodes that make up a deal: seed s plays deal s mod prod.
    deal_radices: tuple[int, ...] = ()
    own_bet: BetFn | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # An obfuscated variant (games.variants) names the registered game it renames; None otherwise.
    variant_of: str | None = None
    # How the dashboard's replays draw it; None: OpenSpiel's state string as text.
    board: Board | None = None

    @property
    def base_name(self) -> str:
        """The registered game underneath: the original's name for a variant, else the name."""
        return self.variant_of or self.name

    @functools.cached_property
    def game(self) -> pyspiel.Game:
        return pyspiel.load_game(self.openspiel_name, dict(self.params))

    @functools.cached_property
    def has_chance(self) -> bool:
        return self.game.get_type().chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC

    @functools.cached_property
    def perfect_information(self) -> bool:
        return self.game.get_type().information == pyspiel.GameType.Information.PERFECT_INFORMATION

    @property
    def min_return(self) -> float:
        return float(self.game.min_utility())

    @property
    def max_return(self) -> float:
        return float(self.game.max_utility())

    @property
    def deal_count(self) -> int:
        return functools.reduce(lambda a, b: a * b, self.deal_radices, 1)

    def normalize(self, value: float) -> float:
        """Map a game return from [min_return, max_return] to [0, 100] (clipped)."""
        low, high = self.min_return, self.max_return
        scaled = 100.0 * (value - low) / (high - low)
        return min(100.0, max(0.0, scaled))

    def describe(self) -> dict[str, Any]:
        # `variant_of` only when set, so an original's description (a run's identity) is as before.
        variant = {"variant_of": self.variant_of} if self.variant_of else {}
        return {
            "name": self.name,
            **variant,
            "title": self.title,
            "openspiel": self.openspiel_name,
            "params": dict(self.params),
            "split": self.split,
            "min_return": self.min_return,
            "max_return": self.max_return,
            "cooperative": self.cooperative,
        }


_REGISTRY: dict[str, GameSpec] = {}


def register_game(spec: GameSpec) -> GameSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"game {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


_CATALOG_LOADED: list[bool] = []


def _load_builtin_specs() -> None:
    # Importing the catalogue's modules registers the built-in games (once, in their order).
    if _CATALOG_LOADED:
        return
    from games.catalog import MODULES

    for module in MODULES:
        importlib.import_module(f"games.catalog.{module}")
    _CATALOG_LOADED.append(True)


def get_game(name: str) -> GameSpec:
    """A registered game, or an obfuscated variant of one (`kuhn_poker.v1`, games.variants)."""
    _load_builtin_specs()
    key = name.strip().lower().replace("-", "_")
    spec = _REGISTRY.get(key)
    if spec is not None:
        return spec
    from games.variants import find_variant, variant_names

    spec = find_variant(key, _REGISTRY)
    if spec is None:
        known = [*_REGISTRY, *variant_names(_REGISTRY.values())]
        raise MarsError(unknown_name("game", name, known))
    return spec


def list_games(split: Split | None = None) -> list[GameSpec]:
    """The registered games (variants are not registered: `games.variants.list_variants`)."""
    _load_builtin_specs()
    return [s for s in _REGISTRY.values() if split is None or s.split == split]
