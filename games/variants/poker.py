"""Variants of Kuhn Poker and Leduc Hold'em: the cards, suits, moves, chips and pot renamed; the
original views are rewritten word by word (`Lexicon`), the labels through the move names."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from games.catalog.poker import KUHN_CARDS, LEDUC_RANKS, LEDUC_SUITS
from games.spec import GameSpec
from games.variants.skin import Skin, each_view
from games.variants.tools import Chooser, Lexicon

SEATS = (("North", "South"), ("Host", "Guest"), ("East", "West"), ("Amber", "Jade"))
RANKS = (  # weakest first
    ("Copper", "Silver", "Gold"),
    ("Lark", "Owl", "Hawk"),
    ("Moss", "Fern", "Oak"),
    ("Pebble", "Stone", "Boulder"),
)
ITEMS = (("tile", "tiles"), ("rune", "runes"), ("token", "tokens"), ("sigil", "sigils"))
STAKES = (("stones", "bowl"), ("beads", "jar"), ("coins", "chest"), ("shells", "heap"))


def _relabel(moves: Mapping[str, str]) -> Callable[[str], str]:
    """Original label -> variant label, e.g. <PASS> -> <WAIT>."""
    table = {f"<{old}>": f"<{new}>" for old, new in moves.items()}

    def relabel(label: str) -> str:
        if label not in table:
            raise ValueError(f"unexpected poker label {label!r}")
        return table[label]

    return relabel


KUHN_TITLES = ("Triad Wager", "High Hand", "Three of Fate", "Lantern Bluff")
KUHN_MOVES = (("WAIT", "PUSH"), ("HOLD", "ADD"), ("REST", "PRESS"), ("STAY", "LEAN"))


def kuhn_skin(spec: GameSpec, choose: Chooser) -> Skin:
    first, second = choose.pick("seats", SEATS)
    low, mid, high = choose.pick("ranks", RANKS)
    item, items = choose.pick("items", ITEMS)
    units, pool = choose.pick("stakes", STAKES)
    wait, add = choose.pick("moves", KUHN_MOVES)
    title = choose.pick("title", KUHN_TITLES)
    names = dict(zip(KUHN_CARDS, (low, mid, high), strict=True))
    lexicon = Lexicon(
        {**names, "PASS": wait, "BET": add},
        {
            "card": item,
            "betting": "moves",
            "bets": "moves",
            "chips": units,
            "pot": pool,
        },
    )
    opening = choose.phrase(
        "opening",
        (
            f"{title} is a wagering game for two sides, {first} and {second}, played with three "
            f"{items}: {low} (weakest), {mid} and {high} (strongest). At the start each side "
            f"puts 1 of its {units} into the {pool} and secretly receives one {item}; the "
            f"remaining {item} stays hidden all game. {first} speaks first.",
            f"In {title}, {first} and {second} each put 1 of their {units} into a shared "
            f"{pool} and are each dealt one of three {items} face down; the third is set aside "
            f"unseen. From weakest to strongest the {items} are {low}, {mid}, {high}. "
            f"{first} has the first move.",
        ),
    )
    moves = choose.phrase(
        "moves",
        (
            f"When it is your move you choose {wait} or {add}. {add} adds 1 of your {units} "
            f"to the {pool}: with nothing to answer it opens the stakes, and after your rival "
            f"has added it answers them. {wait} adds nothing: with nothing to answer it just "
            f"hands the move over, but after your rival has added it means giving up, and the "
            f"rival takes the {pool} at once.",
            f"A move is either {wait} or {add}. {add} puts 1 more of your {units} in the "
            f"{pool}, either starting the stakes or matching the 1 your rival just put in. "
            f"{wait} puts in nothing; it is harmless while nobody has added, yet once your rival "
            f"has added it surrenders the {pool} to them.",
        ),
    )
    ending = (
        f"The hand is over when both sides have chosen {wait} one after the other, when "
        f"{add} has been answered with {add}, or when a side gives up. If nobody gave up, both "
        f"{items} are turned over and the stronger one collects the {pool}. Your score is what "
        f"you gain or lose in {units}, from -2 to +2.\nMoves are written <{wait}> and <{add}>."
    )
    compact = (
        f"{title}: {items} {low}<{mid}<{high}, 1 of your {units} in the {pool} to start. "
        f"{wait}=wait/give up, {add}=add/match 1."
    )
    return Skin(
        title,
        f"{opening}\n{moves} {ending}",
        compact,
        (first, second),
        _relabel({"PASS": wait, "BET": add}),
        each_view(lexicon),
    )


LEDUC_TITLES = ("Twin Crest Wager", "Crest and Strength", "Shared Omen", "River Wager")
LEDUC_MOVES = (
    ("QUIT", "EVEN", "CLIMB"),
    ("YIELD", "MATCH", "PRESS"),
    ("DROP", "MEET", "BOOST"),
    ("LEAVE", "LEVEL", "SURGE"),
)
SUITS = (("red", "blue"), ("sun", "moon"), ("leaf", "wave"), ("iron", "glass"))
PHASES = ("phase", "stage", "leg", "spell")


def leduc_skin(spec: GameSpec, choose: Chooser) -> Skin:
    first, second = choose.pick("seats", SEATS)
    ranks = choose.pick("ranks", RANKS)
    suits = choose.pick("suits", SUITS)
    item, items = choose.pick("items", ITEMS)
    units, pool = choose.pick("stakes", STAKES)
    leave, even, climb = choose.pick("moves", LEDUC_MOVES)
    phase = choose.pick("phase", PHASES)
    title = choose.pick("title", LEDUC_TITLES)
    cards = {
        rank + suit: f"{ranks[r]}-{suits[s]}"
        for r, rank in enumerate(LEDUC_RANKS)
        for s, suit in enumerate(LEDUC_SUITS)
    }
    lexicon = Lexicon(
        {
            **cards,
            "FOLD": leave,
            "CALL": even,
            "RAISE": climb,
            "r1": f"{phase}1",
            "r2": f"{phase}2",
        },
        {
            "private card": f"hidden {item}",
            "public card": f"shared {item}",
            "betting round": f"current {phase}",
            "round 1 betting": f"{phase} 1 moves",
            "round 2 betting": f"{phase} 2 moves",
            "chips": units,
            "card": item,
            "public": "shared",
            "round": phase,
            "pot": pool,
        },
    )
    sample = f"{ranks[0]}-{suits[0]}"
    opening = choose.phrase(
        "opening",
        (
            f"{title} is a wagering game for two sides, {first} and {second}, with six {items}: "
            f"three strengths, {ranks[0]} (weakest), {ranks[1]} and {ranks[2]} (strongest), "
            f"each in two crests, {suits[0]} and {suits[1]}; {sample} is the {ranks[0]} of "
            f"crest {suits[0]}. Each side puts 1 of its {units} into the {pool} and is dealt "
            f"one hidden {item}.",
            f"In {title} the six {items} are {ranks[0]}, {ranks[1]} and {ranks[2]} (from "
            f"weakest to strongest) in the crests {suits[0]} and {suits[1]}, written like "
            f"{sample}. {first} and {second} each start with 1 of their {units} in the {pool} "
            f"and one hidden {item}.",
        ),
    )
    phases = (
        f"The game has two {phase}s and {first} moves first in each; between them one shared "
        f"{item} is turned face up for both sides."
    )
    moves = choose.phrase(
        "moves",
        (
            f"Your move is {leave}, {even} or {climb}. {even} puts in whatever you owe to draw "
            f"level with your rival (nothing, if you owe nothing). {climb} puts in what you owe "
            f"and then 2 {units} more in the first {phase}, 4 more in the second; a {phase} "
            f"allows two {climb} moves at most. {leave} abandons the {pool} to your rival and "
            f"is only possible while you owe {units}.",
            f"On a move you pick {leave}, {even} or {climb}. With {even} you pay exactly what "
            f"you owe, possibly nothing. With {climb} you pay what you owe plus an extra 2 "
            f"{units} (first {phase}) or 4 {units} (second {phase}), at most twice per {phase}. "
            f"With {leave}, allowed only when you owe something, you give up and your rival "
            f"takes the {pool}.",
        ),
    )
    ending = (
        f"A {phase} closes once a {climb} is answered with {even}, or when both sides choose "
        f"{even} with nothing owed. If nobody gave up, the hidden {items} are compared: one "
        f"whose strength equals the shared {item}'s wins; if neither does, the stronger wins; "
        f"equal strengths share the {pool}. Your score is your gain or loss in {units}, 13 at "
        f"most either way.\nMoves are written <{leave}>, <{even}> and <{climb}>."
    )
    compact = (
        f"{title}: {items} {ranks[0]}<{ranks[1]}<{ranks[2]} in 2 crests; matching the shared "
        f"{item} wins. {even}=level up, {climb}=add more, {leave}=give up."
    )
    return Skin(
        title,
        f"{opening}\n{phases}\n{moves}\n{ending}",
        compact,
        (first, second),
        _relabel({"FOLD": leave, "CALL": even, "RAISE": climb}),
        each_view(lexicon),
    )
