"""Variants of Tic-Tac-Toe and Connect Four: new signs for the two sides and the empty cell, new
names for rows and columns (letters or numbers, counted from either side), a new move verb."""

from __future__ import annotations

import re
from collections.abc import Sequence

from games.spec import GameSpec, SeatView
from games.variants.skin import Skin
from games.variants.tools import Chooser

SIDES = (("Sun", "Moon"), ("Fox", "Hare"), ("Amber", "Slate"), ("North", "South"))
SIGNS = (("#", "@"), ("+", "*"), ("&", "%"), ("$", "="))
EMPTY = ("-", "_", ":")
_ORIGINAL_CELLS = {".": 0, "x": 1, "o": 2}  # OpenSpiel's board: empty, first side, second side
_TTT_LABEL = re.compile(r"<[XO]\((\d+),(\d+)\)>")
_C4_LABEL = re.compile(r"<[XO](\d+)>")


def _grid_rows(view: SeatView) -> list[str]:
    """The board's rows (top first) in OpenSpiel's '.', 'x', 'o' from the original compact view."""
    return [line for line in view.compact.split("\n") if line and set(line) <= set(".xo")]


class _Board:
    """How one variant draws a board: signs, and names of columns (left to right) and rows."""

    def __init__(self, signs: Sequence[str], columns: Sequence[str], rows: Sequence[str]) -> None:
        self.cells = str.maketrans({key: signs[index] for key, index in _ORIGINAL_CELLS.items()})
        self.columns = list(columns)
        self.rows = list(rows)  # top row first; empty for Connect Four (no row names)

    def reskin(self, view: SeatView) -> SeatView:
        grid = [row.translate(self.cells) for row in _grid_rows(view)]
        width = max((len(name) for name in self.rows), default=0)
        header = " " * (width + 2) + " ".join(self.columns) if self.rows else " ".join(self.columns)
        names = self.rows or [""] * len(grid)
        drawn = [
            (f"{name:<{width}}  " if self.rows else "") + " ".join(row)
            for name, row in zip(names, grid, strict=True)
        ]
        compact = [f"{name}{row}" for name, row in zip(names, grid, strict=True)]
        pad = " " * width
        return SeatView(
            state="\n".join([header, *drawn]),
            compact="\n".join([pad + "".join(self.columns), *compact]),
        )


TTT_TITLES = ("Three Across", "Nine Squares", "Line of Three", "Field Claim")
TTT_VERBS = ("claim", "take", "seize", "occupy")
TTT_COLUMNS = (("a", "b", "c"), ("p", "q", "r"), ("d", "e", "f"), ("u", "v", "w"))


def tic_tac_toe_skin(spec: GameSpec, choose: Chooser) -> Skin:
    first, second = choose.pick("sides", SIDES)
    signs = (choose.pick("empty", EMPTY), *choose.pick("signs", SIGNS))
    columns = choose.pick("columns", TTT_COLUMNS)
    from_bottom = choose.phrase("row order", (True, False))
    rows = ["3", "2", "1"] if from_bottom else ["1", "2", "3"]
    verb = choose.pick("verb", TTT_VERBS)
    title = choose.pick("title", TTT_TITLES)
    board = _Board(signs, columns, rows)

    def relabel(label: str) -> str:
        match = _TTT_LABEL.fullmatch(label)
        if match is None:
            raise ValueError(f"unexpected Tic-Tac-Toe label {label!r}")
        return f"<{verb} {columns[int(match[2])]}{rows[int(match[1])]}>"

    example = f"{columns[2]}{rows[0]}"
    start = (
        choose.phrase(
            "opening",
            (
                f"{title} is a game for two sides, {first} and {second}, on a square field of "
                f"nine spaces, three by three. {first} moves first and then the sides alternate. "
                f"A move puts the mover's sign on one space that is still free: {first} uses "
                f"'{signs[1]}' and {second} uses '{signs[2]}'.",
                f"In {title}, {first} and {second} take turns claiming the spaces of a three by "
                f"three field, {first} first. Each claim puts the mover's sign ('{signs[1]}' for "
                f"{first}, '{signs[2]}' for {second}) on a single free space.",
            ),
        )
        + "\n"
        + choose.phrase(
            "goal",
            (
                "The first side to own three spaces on one straight line (across, down or "
                "corner to corner) wins on the spot. When no free space is left and neither "
                "side has such a line, the game ends level.",
                "Three of your signs along one straight line, across, down or on a long diagonal, "
                "win immediately. If the field fills up before that, nobody wins.",
            ),
        )
    )
    rules = start + (
        f"\nFree spaces are drawn as '{signs[0]}'. Columns are named {', '.join(columns)} from "
        f"left to right and rows {', '.join(sorted(rows))} counting from the "
        f"{'bottom' if from_bottom else 'top'}; a space is named by its column, then its row. "
        f"The move <{verb} {example}> puts your sign on space {example}, the top right corner."
    )
    compact = (
        f"{title}: own 3 spaces in a line on the 3 by 3 field to win. A space is its column "
        f"letter then its row number, e.g. {example}."
    )
    return Skin(title, rules, compact, (first, second), relabel, board.reskin)


C4_TITLES = ("Four Down", "Gravity Lines", "Column Quartet", "Falling Fours")
C4_VERBS = ("slot", "load", "sink", "stack")
C4_COLUMNS = (tuple("abcdefg"), tuple("pqrstuv"), tuple("1234567"), tuple("hijklmn"))


def connect_four_skin(spec: GameSpec, choose: Chooser) -> Skin:
    first, second = choose.pick("sides", SIDES)
    signs = (choose.pick("empty", EMPTY), *choose.pick("signs", SIGNS))
    names = choose.pick("columns", C4_COLUMNS)
    from_right = choose.phrase("column order", (True, False))
    columns = list(reversed(names)) if from_right else list(names)  # left to right
    verb = choose.pick("verb", C4_VERBS)
    title = choose.pick("title", C4_TITLES)
    board = _Board(signs, columns, [])

    def relabel(label: str) -> str:
        match = _C4_LABEL.fullmatch(label)
        if match is None:
            raise ValueError(f"unexpected Connect Four label {label!r}")
        return f"<{verb} {columns[int(match[1])]}>"

    opening = choose.phrase(
        "opening",
        (
            f"{title} is played by two sides, {first} and {second}, on an upright frame 7 "
            f"columns wide and 6 levels tall. {first} begins and then the sides alternate. On a "
            "move you send one of your pieces down a column that still has room, and it comes "
            "to rest on the lowest free space of that column.",
            f"In {title} two sides take turns, {first} first and {second} second, sending pieces "
            "down the columns of a standing frame (7 columns, 6 levels). A piece sinks to the "
            "lowest empty space of its column; a column with no empty space cannot take one.",
        ),
    )
    goal = choose.phrase(
        "goal",
        (
            "Four of your own pieces next to each other along one straight line (level, "
            "upright or slanted) win at once. If the frame is full and nobody has four in a "
            "line, the game ends level.",
            "The first side with four adjacent pieces on one line, whether level, upright or "
            "slanted, wins immediately; a full frame without such a line means nobody wins.",
        ),
    )
    rules = (
        f"{opening}\n{goal}\nThe frame is drawn top level first, '{signs[0]}' for an empty "
        f"space, '{signs[1]}' for a piece of {first} and '{signs[2]}' for a piece of {second}. "
        f"The columns are named {', '.join(names)} starting from the "
        f"{'right' if from_right else 'left'}, as in the top line of the drawing. The move "
        f"<{verb} {names[0]}> sends one of your pieces down column {names[0]}."
    )
    compact = (
        f"{title}: pieces sink to the bottom of a column; 4 in a line wins. Columns are named "
        "in the top line."
    )
    return Skin(title, rules, compact, (first, second), relabel, board.reskin)
