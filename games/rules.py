"""How an episode is dealt, read and scored: the run-wide switches between this project's own
choices and the MARSHAL code's (docs/parity.md has the table).

- `turn_rewards`: "outcome" pays each seat its game outcome on its last turn; "step" pays
  OpenSpiel's per-step rewards as they happen (the code's way: in Hanabi every point scored is
  paid on the turn that scored it, and on the other seat's latest turn).
- `invalid_outcome`: "forfeit" ends the game with the offender's loss (in Hanabi the score so far
  is lost for both); "reference" is the code's: the other seat wins what the offender loses, in
  Hanabi both keep the score so far and the offender's rewards over the game sum to -10.
- `length_penalty`: "light" (-0.1 per 2,048 completion tokens over 2,048, at most -0.5 per
  turn) or "reference" (the code's -0.5 per 2,037 tokens over 2,048, no cap).
- `leduc_deals`: "natural" (OpenSpiel's 120 ordered deals, seed s plays deal s mod 120) or
  "rank_triples" (the code's 24 rank triples, seed s plays triple s mod 24).
- `parse_mode`: "lenient" or "strict" (games.parsing).

The prompt styles (`full`, `compact`, `numbered`: games.prompts) are named here too, so that
settings can check them without loading OpenSpiel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from core.errors import MarsError

TurnRewards = Literal["outcome", "step"]
InvalidOutcome = Literal["forfeit", "reference"]
LengthPenaltyStyle = Literal["light", "reference"]
LeducDeals = Literal["natural", "rank_triples"]
ParseMode = Literal["lenient", "strict"]
PromptStyle = Literal["full", "compact", "numbered"]
PROMPT_STYLES: tuple[str, ...] = ("full", "compact", "numbered")

CHOICES: dict[str, tuple[str, ...]] = {
    "turn_rewards": ("outcome", "step"),
    "invalid_outcome": ("forfeit", "reference"),
    "length_penalty": ("light", "reference"),
    "leduc_deals": ("natural", "rank_triples"),
    "parse_mode": ("lenient", "strict"),
}


def check_choice(name: str, value: str) -> str:
    allowed = CHOICES[name]
    if value not in allowed:
        raise MarsError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


@dataclass(frozen=True)
class PlayRules:
    turn_rewards: TurnRewards = "outcome"
    invalid_outcome: InvalidOutcome = "forfeit"
    length_penalty: LengthPenaltyStyle = "light"
    leduc_deals: LeducDeals = "natural"
    parse_mode: ParseMode = "lenient"

    def __post_init__(self) -> None:
        for name in CHOICES:
            check_choice(name, getattr(self, name))

    def describe(self) -> dict[str, str]:
        """The rules as recorded in arena and training summaries."""
        return {name: getattr(self, name) for name in CHOICES}


REFERENCE_RULES = PlayRules(
    turn_rewards="step",
    invalid_outcome="reference",
    length_penalty="reference",
    leduc_deals="rank_triples",
    parse_mode="strict",
)
DEFAULT_RULES = PlayRules()
RULE_SETS: dict[str, PlayRules] = {"default": DEFAULT_RULES, "marshal": REFERENCE_RULES}


def named_rules(name: str, *, parse_mode: str | None = None) -> PlayRules:
    """A named rule set (`mars arena --rules`), with an optional parse mode on top."""
    if name not in RULE_SETS:
        raise MarsError(f"--rules must be one of {', '.join(RULE_SETS)}, not {name!r}")
    rules = RULE_SETS[name]
    if parse_mode is None:
        return rules
    check_choice("parse_mode", parse_mode)
    return dataclasses.replace(rules, parse_mode=parse_mode)  # type: ignore[arg-type]
