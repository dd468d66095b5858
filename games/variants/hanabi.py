"""Variants of the Hanabi games: colors (letters and names), cards, fireworks, tokens, the deck
and the three moves renamed; the original view is rewritten word by word (`Lexicon`)."""

from __future__ import annotations

import re

from games.catalog.hanabi import COLOR_NAMES
from games.spec import GameSpec
from games.variants.skin import Skin, each_view
from games.variants.tools import Chooser, Lexicon

TITLES = ("Quiet Harmony", "Starlight Guild", "Twin Beacons", "Evening Chorus")
SEATS = (("Ada", "Bo"), ("Kite", "Reed"), ("Left", "Right"), ("East", "West"))
# Other letters than R, Y, G, W and B, so an original color letter never names a new color.
COLOR_SETS = (
    (("A", "amber"), ("C", "cyan"), ("V", "violet"), ("P", "pink"), ("T", "teal")),
    (("S", "sand"), ("I", "indigo"), ("L", "lime"), ("M", "mauve"), ("C", "coral")),
    (("P", "plum"), ("T", "tan"), ("N", "navy"), ("A", "aqua"), ("E", "ebony")),
    (("V", "vermilion"), ("L", "lilac"), ("S", "slate"), ("K", "khaki"), ("H", "honey")),
)
PLACE = ("Launch", "Place", "Set", "Lay")
SCRAP = (
    ("Scrap", "scrapped", "scraps"),
    ("Drop", "dropped", "drops"),
    ("Toss", "tossed", "tosses"),
)
SHOW = ("Signal", "Point", "Indicate", "Name")
TILES = (("tile", "tiles"), ("stone", "stones"), ("disc", "discs"), ("block", "blocks"))
HUES = (("hue", "hues"), ("shade", "shades"), ("tint", "tints"), ("kind", "kinds"))
LEVELS = (("level", "levels"), ("height", "heights"), ("step", "steps"), ("grade", "grades"))
TOWERS = (("tower", "towers"), ("stack", "stacks"), ("ladder", "ladders"), ("shrine", "shrines"))
LIVES = ("shields", "hearts", "lamps", "wards")
CLUES = ("clue", "tip", "whisper", "nod")
DECKS = ("reserve", "supply", "stockpile", "well")

_PLAY = re.compile(r"<(Play|Discard) card (\d+)>")
_REVEAL = re.compile(r"<Reveal (color|rank) (\w+)>")


def _copies(rank: int, ranks: int) -> int:
    if rank == 1:
        return 3
    return 1 if rank == ranks else 2


def hanabi_skin(spec: GameSpec, choose: Chooser) -> Skin:
    params = spec.params
    ranks, hand = int(params["ranks"]), int(params["hand_size"])
    originals = "RYGWB"[: int(params["colors"])]
    palette = choose.shuffled("colors", choose.pick("colors", COLOR_SETS))
    colors = dict(zip(originals, palette[: len(originals)], strict=True))
    first, second = choose.pick("seats", SEATS)
    place, (scrap, scrapped, scraps), show = (
        choose.pick("place", PLACE),
        choose.pick("scrap", SCRAP),
        choose.pick("show", SHOW),
    )
    tile, tiles = choose.pick("tiles", TILES)
    hue, hues = choose.pick("hues", HUES)
    level, levels = choose.pick("levels", LEVELS)
    tower, towers = choose.pick("towers", TOWERS)
    lives, clue, deck = (
        choose.pick("lives", LIVES),
        choose.pick("clues", CLUES),
        choose.pick("decks", DECKS),
    )
    title = choose.pick("title", TITLES)

    symbols = {old: new for old, (new, _) in colors.items()}
    symbols |= {COLOR_NAMES[old]: name for old, (_, name) in colors.items()}
    symbols |= {f"{old}{n}": f"{new}{n}" for old, (new, _) in colors.items() for n in range(10)}
    lexicon = Lexicon(
        symbols,
        {
            "life tokens": lives,
            "lives": lives,
            "information tokens": f"{clue} tokens",
            "info": f"{clue}s",
            "hints": f"{clue}s",
            "fireworks": towers,
            "deck": deck,
            "discarded": scrapped,
            "discards": scraps,
            "cards": tiles,
            "card": tile,
            "colors": hues,
            "color": hue,
            "ranks": levels,
            "rank": level,
        },
    )

    def relabel(label: str) -> str:
        if match := _PLAY.fullmatch(label):
            verb = place if match[1] == "Play" else scrap
            return f"<{verb} {tile} {match[2]}>"
        if match := _REVEAL.fullmatch(label):
            what = hue if match[1] == "color" else level
            return f"<{show} {what} {symbols.get(match[2], match[2])}>"
        raise ValueError(f"unexpected Hanabi label {label!r}")

    hue_list = ", ".join(f"{name} ({letter})" for letter, name in colors.values())
    copies = ", ".join(f"{_copies(r, ranks)} of {level} {r}" for r in range(1, ranks + 1))
    per_hue = sum(_copies(r, ranks) for r in range(1, ranks + 1))
    top = int(params["colors"]) * ranks
    opening = choose.phrase(
        "opening",
        (
            f"{title} is a team game for two players, {first} and {second}, who share one "
            f"score. Every {tile} has a {hue} ({hue_list}) and a {level} from 1 to {ranks}; "
            f"each {hue} comes as {copies} ({per_hue} {tiles}). Each player holds {hand} "
            f"{tiles} facing outwards, so you see your partner's {tiles} and never your own.",
            f"In {title}, {first} and {second} work together for a single shared score. The "
            f"{tiles} come in the {hues} {hue_list}, with {levels} 1 to {ranks}: per {hue} "
            f"{copies}, {per_hue} {tiles} in all. Everyone holds {hand} {tiles} the wrong way "
            f"round: your partner's are visible to you, your own are not.",
        ),
    )
    rules = f"""\
{opening} Together you raise one {tower} per {hue}, adding its {tiles} in {level} order from 1 up.
The team shares {params["max_information_tokens"]} {clue} tokens and \
{params["max_life_tokens"]} {lives}. A turn is exactly one of these actions:
- <{place} {tile} N>: put {tile} N of your hand on the {tower} of its {hue}. It fits when its \
{level} is one above the top of that {tower} (the score rises by 1); if not, it is thrown away \
and the team loses one of its {lives}.
- <{scrap} {tile} N>: throw {tile} N away and win back one {clue} token (impossible while the \
team holds all of them).
- <{show} {hue} C> or <{show} {level} L>: pay one {clue} token to point out to your partner \
every {tile} of {hue} C (or {level} L) in their hand.
After putting a {tile} on a {tower} or throwing it away you take a new one while the {deck} \
lasts. The {tiles} of a hand are numbered from 1 in the order they are listed. The game stops \
when the team has no {lives} left (the score drops to 0), when every {tower} is finished, or one \
round after the {deck} runs out. The score is the number of {tiles} on the {towers}, {top} at \
most."""
    compact = (
        f"{title} (team game): you see your partner's {tiles}, not yours; raise each "
        f"{hue}'s {tower} in {level} order; {top} {tiles} at best."
    )
    return Skin(
        title,
        rules,
        compact,
        (first, second),
        relabel,
        each_view(lexicon),
    )
