"""Kuhn Poker and Leduc Hold'em: imperfect-information betting games (returns in chips).

Views are built only from the acting seat's own `information_state_string` and
`observation_string`, which never contain the other seat's private card.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyspiel

from games.catalog.board import bracket_upper
from games.spec import Board, GameSpec, RewardRules, SeatView, register_game

POKER_REWARDS = RewardRules(penalty_kind="bet")

KUHN_CARDS = "JQK"
KUHN_MOVES = {"p": "PASS", "b": "BET"}


def _actor_names(seat: int) -> tuple[str, str]:
    """Names for (player 1, player 2) from the point of view of `seat`."""
    return ("you", "opponent") if seat == 0 else ("opponent", "you")


def _kuhn_contributions(state: pyspiel.State, seat: int) -> list[int]:
    # observation_string: the seat's card digit, then the chips each player has put in.
    observation = state.observation_string(seat)
    return [int(ch) for ch in observation[1:]]


def kuhn_own_bet(state: pyspiel.State, seat: int) -> float:
    return float(_kuhn_contributions(state, seat)[seat])


def _kuhn_view(state: pyspiel.State, seat: int) -> SeatView:
    info = state.information_state_string(seat)
    card = KUHN_CARDS[int(info[0])]
    names = _actor_names(seat)
    moves = [f"{names[i % 2]} {KUHN_MOVES[ch]}" for i, ch in enumerate(info[1:])]
    chips = _kuhn_contributions(state, seat)
    mine, theirs = chips[seat], chips[1 - seat]
    betting = ", ".join(moves) if moves else "none yet"
    full = (
        f"Your card: {card}\n"
        f"Betting so far: {betting}\n"
        f"Chips in the pot: you {mine}, opponent {theirs}"
    )
    compact = f"card {card}; bets: {betting}; pot you {mine} opp {theirs}"
    return SeatView(state=full, compact=compact)


# A replay's `poker` board (games/positions.py): each seat's private card, the public card, each
# seat's committed chips, the pot, and the betting so far per round as [seat, label].
Cards = Callable[[pyspiel.State, int], tuple[str | None, str | None]]
Betting = Callable[[pyspiel.State], list[list[str]]]


def poker_board(cards: Cards, betting: Betting, **style: Any) -> Board:
    """A `poker` board from the game's own readers of (the seat's private card, the public card)
    and of the moves so far per round (the first seat opens every round)."""

    def read(spec: GameSpec, state: pyspiel.State) -> dict[str, Any]:
        seen = [cards(state, seat) for seat in range(2)]
        chips = [int(spec.own_bet(state, seat)) if spec.own_bet else 0 for seat in range(2)]
        return {
            "cards": [card for card, _ in seen],
            "public": next((public for _, public in seen if public), None),
            "chips": chips,
            "pot": sum(chips),
            "betting": [
                [[k % 2, label] for k, label in enumerate(moves)] for moves in betting(state)
            ],
        }

    return Board("poker", read, style=style)


def _kuhn_cards(state: pyspiel.State, seat: int) -> tuple[str | None, None]:
    info = state.information_state_string(seat)
    return (KUHN_CARDS[int(info[0])] if info[:1].isdigit() else None), None


def _kuhn_betting(state: pyspiel.State) -> list[list[str]]:
    info = state.information_state_string(0)
    return [[f"<{KUHN_MOVES[ch]}>" for ch in info[1:] if ch in KUHN_MOVES]]


KUHN_RULES = """\
Kuhn Poker is a two-player poker game with a deck of three cards: J (lowest), Q and K (highest). \
Each player puts 1 chip (the ante) into the pot and gets one private card; the third card is not \
used. Player 1 acts first.
On your turn you either PASS or BET. BET puts 1 more chip into the pot (a bet, or a call when \
the other player has bet). PASS puts in nothing: it is a check when nobody has bet, and a fold \
when the other player has bet (the folding player gives up the pot). The betting ends when both \
players have passed, when a bet has been called, or when a player folds. If nobody folded, the \
higher card wins the pot (showdown). Your result is the chips you win or lose (from -2 to +2).
Actions are written <PASS> and <BET>."""

register_game(
    GameSpec(
        name="kuhn_poker",
        title="Kuhn Poker",
        openspiel_name="kuhn_poker",
        params={},
        split="train",
        rules=KUHN_RULES,
        compact_rules="Kuhn poker: cards J<Q<K, ante 1. PASS=check/fold, BET=bet/call 1.",
        seat_names=("Player 1", "Player 2"),
        label=bracket_upper,
        view=_kuhn_view,
        rewards=POKER_REWARDS,
        deal_radices=(3, 2),  # 6 ordered deals
        own_bet=kuhn_own_bet,
        extra={"solvable": True},
        board=poker_board(_kuhn_cards, _kuhn_betting),
    )
)


LEDUC_RANKS = "JQK"
LEDUC_SUITS = "sh"
LEDUC_MOVES = {"0": "FOLD", "1": "CALL", "2": "RAISE"}
# Fields look like [Private: 5], [Round1: 2 1] or, for the round number, [Round 1].
_FIELD = re.compile(r"\[([A-Za-z]+\d*)(?:: ?| )([^\]]*)\]")


def leduc_card(card: int) -> str:
    return f"{LEDUC_RANKS[card // 2]}{LEDUC_SUITS[card % 2]}"


def _fields(text: str) -> dict[str, str]:
    return {name: value.strip() for name, value in _FIELD.findall(text)}


def _leduc_contributions(state: pyspiel.State, seat: int) -> list[int]:
    return [int(x) for x in _fields(state.observation_string(seat))["Ante"].split()]


def leduc_own_bet(state: pyspiel.State, seat: int) -> float:
    return float(_leduc_contributions(state, seat)[seat])


def _leduc_view(state: pyspiel.State, seat: int) -> SeatView:
    info = _fields(state.information_state_string(seat))
    card = leduc_card(int(info["Private"]))
    public = info.get("Public")
    public_text = leduc_card(int(public)) if public not in (None, "") else "not revealed yet"
    names = _actor_names(seat)
    rounds = []
    for key in ("Round1", "Round2"):
        codes = info.get(key, "").split()
        moves = [f"{names[i % 2]} {LEDUC_MOVES[code]}" for i, code in enumerate(codes)]
        rounds.append(", ".join(moves) if moves else "none")
    chips = _leduc_contributions(state, seat)
    mine, theirs = chips[seat], chips[1 - seat]
    full = (
        f"Your private card: {card}\n"
        f"Public card: {public_text}\n"
        f"Betting round: {info['Round']} of 2\n"
        f"Chips in the pot: you {mine}, opponent {theirs}\n"
        f"Round 1 betting: {rounds[0]}\n"
        f"Round 2 betting: {rounds[1]}"
    )
    compact = (
        f"card {card}; public {public_text if public else '-'}; round {info['Round']}; "
        f"pot you {mine} opp {theirs}; r1: {rounds[0]}; r2: {rounds[1]}"
    )
    return SeatView(state=full, compact=compact)


# Leduc's information state: [Private: 5], [Public: 2], [Round1: 2 1] (the moves as codes).
_LEDUC_FIELD = re.compile(r"\[(Private|Public|Round1|Round2): ?([^\]]*)\]")


def _leduc_cards(state: pyspiel.State, seat: int) -> tuple[str | None, str | None]:
    fields = dict(_LEDUC_FIELD.findall(state.information_state_string(seat)))
    private, public = fields.get("Private", "").strip(), fields.get("Public", "").strip()
    card = leduc_card(int(private)) if private.lstrip("-").isdigit() and int(private) >= 0 else None
    return card, (leduc_card(int(public)) if public.isdigit() else None)


def _leduc_betting(state: pyspiel.State) -> list[list[str]]:
    fields = dict(_LEDUC_FIELD.findall(state.information_state_string(0)))
    rounds = [
        [f"<{LEDUC_MOVES[code]}>" for code in fields.get(name, "").split() if code in LEDUC_MOVES]
        for name in ("Round1", "Round2")
    ]
    return rounds if rounds[1] or "Public" in fields else rounds[:1]


LEDUC_RULES = """\
Leduc Hold'em is a two-player poker game with a deck of six cards: J, Q and K in two suits \
(s and h), so Js is the jack of suit s. Each player puts 1 chip (the ante) into the pot and gets \
one private card. There are two betting rounds; Player 1 acts first in both. After the first \
round one public card is revealed.
On your turn you FOLD, CALL or RAISE. CALL matches the other player's chips (a check when \
nothing is owed). RAISE puts in the amount owed plus a raise of 2 chips in round 1 and 4 chips \
in round 2; at most two raises are allowed per round. FOLD gives up the pot to the other player \
(only allowed when you owe chips). A round ends when a raise is called or both players have \
checked.
At the showdown a player whose private card has the same rank as the public card (a pair) wins; \
otherwise the higher rank wins (K > Q > J); equal ranks split the pot. Your result is the chips \
you win or lose (at most 13 either way).
Actions are written <FOLD>, <CALL> and <RAISE>."""

register_game(
    GameSpec(
        name="leduc_poker",
        title="Leduc Hold'em",
        openspiel_name="leduc_poker",
        params={},
        split="heldout",
        rules=LEDUC_RULES,
        compact_rules=(
            "Leduc poker: cards J<Q<K in 2 suits; a pair with the public card wins. "
            "CALL=check/call, RAISE, FOLD."
        ),
        seat_names=("Player 1", "Player 2"),
        label=bracket_upper,
        view=_leduc_view,
        rewards=POKER_REWARDS,
        deal_radices=(6, 5, 4),  # 30 ordered private deals times 4 public cards
        own_bet=leduc_own_bet,
        extra={"solvable": True},
        board=poker_board(_leduc_cards, _leduc_betting, public_card=True),
    )
)
