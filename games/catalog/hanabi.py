"""Hanabi (two cooperative players): Mini Hanabi (training) and Simple Hanabi (held out).

OpenSpiel's Hanabi has no information_state_string, so a seat's view comes from its
`observation_string`, which shows the partner's cards and hides the seat's own (as `XX`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyspiel

from core.errors import MarsError
from games.spec import Board, GameSpec, RewardRules, SeatView, register_game

HANABI_REWARDS = RewardRules(penalty_kind="score", step_terminal_zero=0.1)
COLOR_NAMES = {"R": "red", "Y": "yellow", "G": "green", "W": "white", "B": "blue"}

_PLAY = re.compile(r"\((Play|Discard) (\d+)\)")
_REVEAL = re.compile(r"\(Reveal player \+1 (color|rank) (\w+)\)")


def hanabi_label(text: str, _seat: int, _action: int) -> str:
    """(Play 0) -> <Play card 1>; (Reveal player +1 color R) -> <Reveal color R>."""
    if match := _PLAY.fullmatch(text):
        return f"<{match.group(1)} card {int(match.group(2)) + 1}>"
    if match := _REVEAL.fullmatch(text):
        return f"<Reveal {match.group(1)} {match.group(2)}>"
    return f"<{text.strip('()')}>"


@dataclass(frozen=True)
class CardLine:
    card: str  # "R1", or "XX" when hidden from the observer
    hinted: str  # two characters: hinted color and rank, "X" where no hint was given
    possible_colors: str
    possible_ranks: str


@dataclass(frozen=True)
class HanabiObservation:
    lives: str
    info_tokens: str
    fireworks: list[str]
    own_hand: list[CardLine]
    partner_hand: list[CardLine]
    deck_size: str
    discards: list[str]


_CARD = re.compile(r"(\w\w) \|\| (\w\w)\|([A-Z]*)(\d*)")


def parse_observation(text: str) -> HanabiObservation | None:
    """Parse OpenSpiel's Hanabi observation string (None if the layout is not the expected one)."""
    values: dict[str, str] = {}
    hands: list[list[CardLine]] = [[]]
    for raw in text.split("\n"):
        line = raw.strip()
        if match := _CARD.fullmatch(line):
            hands[-1].append(CardLine(*match.groups()))
        elif line == "-----":
            hands.append([])
        elif ":" in line:
            name, _, value = line.partition(":")
            values[name.strip()] = value.strip()
    needed = ("Life tokens", "Info tokens", "Fireworks", "Deck size", "Discards")
    if len(hands) != 2 or any(name not in values for name in needed):
        return None
    return HanabiObservation(
        lives=values["Life tokens"],
        info_tokens=values["Info tokens"],
        fireworks=values["Fireworks"].split(),
        own_hand=hands[0],
        partner_hand=hands[1],
        deck_size=values["Deck size"],
        discards=values["Discards"].split(),
    )


def _hint_text(card: CardLine) -> str:
    color, rank = card.hinted[0], card.hinted[1]
    color_text = COLOR_NAMES.get(color, color) if color != "X" else "?"
    rank_text = rank if rank != "X" else "?"
    return f"color {color_text}, rank {rank_text}"


def _hanabi_view(state: pyspiel.State, seat: int) -> SeatView:
    raw = state.observation_string(seat)
    obs = parse_observation(raw)
    if obs is None:  # unexpected layout: show OpenSpiel's text as it is
        return SeatView(state=raw, compact=" ".join(raw.split()))
    own = [
        f"  card {i}: hidden; hints so far: {_hint_text(c)}; could be colors "
        f"{' '.join(c.possible_colors) or '-'}, ranks {' '.join(c.possible_ranks) or '-'}"
        for i, c in enumerate(obs.own_hand, 1)
    ]
    partner = [
        f"  card {i}: {c.card} (your partner knows: {_hint_text(c)})"
        for i, c in enumerate(obs.partner_hand, 1)
    ]
    full = "\n".join(
        [
            f"Life tokens: {obs.lives}",
            f"Information tokens: {obs.info_tokens}",
            f"Fireworks: {' '.join(obs.fireworks)}",
            f"Cards left in the deck: {obs.deck_size}",
            f"Discarded cards: {' '.join(obs.discards) or 'none'}",
            "Your hand (you cannot see your own cards):",
            *own,
            "Your partner's hand:",
            *partner,
        ]
    )
    compact = (
        f"lives {obs.lives} info {obs.info_tokens} fireworks {' '.join(obs.fireworks)} "
        f"deck {obs.deck_size} discards {' '.join(obs.discards) or '-'}\n"
        f"you: {' '.join(c.hinted.replace('X', '?') for c in obs.own_hand)} (hints)\n"
        f"partner: {' '.join(c.card for c in obs.partner_hand)}"
    )
    return SeatView(state=full, compact=compact)


def _card(line: CardLine) -> dict[str, str]:
    return {
        "card": line.card,
        "hinted": line.hinted,
        "colors": line.possible_colors,
        "ranks": line.possible_ranks,
    }


def hanabi_position(spec: GameSpec, state: pyspiel.State) -> dict[str, Any]:
    """A replay's `hanabi` board (games/positions.py), from the spectator's state string, where
    both hands are face up."""
    seen = parse_observation(str(state))
    if seen is None:
        raise MarsError(f"{spec.name}: OpenSpiel's Hanabi state string has an unknown layout")
    fireworks = {item[0]: int(item[1:]) for item in seen.fireworks if item[1:].isdigit()}
    return {
        "hands": [[_card(line) for line in hand] for hand in (seen.own_hand, seen.partner_hand)],
        "fireworks": fireworks,
        "score": sum(fireworks.values()),
        "info_tokens": int(seen.info_tokens),
        "max_info_tokens": int(spec.params.get("max_information_tokens", 8)),
        "life_tokens": int(seen.lives),
        "max_life_tokens": int(spec.params.get("max_life_tokens", 3)),
        "deck": int(seen.deck_size),
        "discards": seen.discards,
    }


def _copies(rank: int, ranks: int) -> int:
    if rank == 1:
        return 3
    return 1 if rank == ranks else 2


def hanabi_rules(params: dict[str, Any]) -> str:
    colors = "RYGWB"[: params["colors"]]
    ranks = params["ranks"]
    color_list = ", ".join(f"{COLOR_NAMES[c]} ({c})" for c in colors)
    copies = ", ".join(f"{_copies(r, ranks)} of rank {r}" for r in range(1, ranks + 1))
    per_color = sum(_copies(r, ranks) for r in range(1, ranks + 1))
    max_score = params["colors"] * ranks
    return f"""\
Hanabi is a cooperative card game for two players who share one score. The cards have a color \
({color_list}) and a rank from 1 to {ranks}; each color has {copies} ({per_color} cards). Each \
player holds {params["hand_size"]} cards facing away: you see your partner's cards but not your \
own. Together you build one firework per color by playing its cards in order of rank, 1 first.
The team has {params["max_information_tokens"]} information tokens and \
{params["max_life_tokens"]} life tokens. On your turn you take exactly one action:
- <Play card N>: play card N of your hand. If it is the next rank of its color's firework it is \
added (the score goes up by 1); otherwise it is discarded and the team loses a life token.
- <Discard card N>: discard card N and regain one information token (not allowed while all \
information tokens are available).
- <Reveal color C> or <Reveal rank R>: spend one information token to tell your partner which \
of their cards have color C (or rank R).
After playing or discarding you draw a new card while the deck lasts. Cards are numbered from 1, \
top to bottom as listed. The game ends when the last life token is lost (the score becomes 0), \
when every firework is complete, or one round after the deck runs out. The score is the number \
of cards in the fireworks (at most {max_score})."""


def _hanabi_spec(name: str, title: str, split: str, params: dict[str, Any]) -> GameSpec:
    max_score = params["colors"] * params["ranks"]
    return GameSpec(
        name=name,
        title=title,
        openspiel_name="hanabi",
        params={"players": 2, **params},
        split=split,  # type: ignore[arg-type]
        rules=hanabi_rules(params),
        compact_rules=(
            f"Hanabi (cooperative): you see your partner's cards, not yours; build each color's "
            f"firework in rank order. Score max {max_score}."
        ),
        seat_names=("Player 1", "Player 2"),
        label=hanabi_label,
        view=_hanabi_view,
        rewards=HANABI_REWARDS,
        cooperative=True,
        board=Board("hanabi", hanabi_position),
    )


MINI_HANABI_PARAMS = {
    "colors": 2,
    "ranks": 2,
    "hand_size": 3,
    "max_information_tokens": 3,
    "max_life_tokens": 3,
}
SIMPLE_HANABI_PARAMS = {
    "colors": 3,
    "ranks": 2,
    "hand_size": 5,
    "max_information_tokens": 8,
    "max_life_tokens": 3,
}

register_game(_hanabi_spec("mini_hanabi", "Mini Hanabi", "train", MINI_HANABI_PARAMS))
register_game(_hanabi_spec("simple_hanabi", "Simple Hanabi", "heldout", SIMPLE_HANABI_PARAMS))
