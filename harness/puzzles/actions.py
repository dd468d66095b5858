"""Action lists in a reply, and their canonical text.

A list is found after a marker (`#### [...]`, or with words between as in `#### Moves: [...]`;
`**Actions List**: [...]`; `Actions: [...]`) or as a line that is only a list; the LAST one
that parses wins. Grid puzzles take the tokens U/D/L/R (or up/down/left/right, any case); after
a marker an unknown token is kept (applying it is an invalid move, as the reference's reward
table has it), while a bare line counts only when every token is a move. Sudoku takes a full
grid (N rows of N integers) or fills [[row, column, value], ...] with 0-based rows and columns
(tuples as Python prints them are read as lists).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from core.errors import MarsError
from harness.puzzles.levels import environment
from harness.puzzles.moves import canonical_move

_MARKED = re.compile(
    r"(?:####[^\[\n]*|\*\*\s*actions\s+list\s*:?\s*\*\*\s*:?|\bactions\s*:)[ \t]*(?=\[)", re.I
)
_BARE = re.compile(r"^[ \t]*(?=\[)", re.M)
_LINE_END = re.compile(r"[ \t.;]*(?:\n|$)")
_NUMBERS = re.compile(r"[\[\]\d\s,+-]*")
_TOKEN_SPLIT = re.compile(r"[,\s]+")
_TUPLES_AS_LISTS = str.maketrans("()", "[]")
MAX_LIST_CHARS = 20_000
GRID_SIZES = (4, 9)


def _closing_bracket(text: str, start: int) -> int:
    """The index just past the bracket that closes the one at `start`, or -1."""
    depth = 0
    for index in range(start, min(len(text), start + MAX_LIST_CHARS)):
        char = text[index]
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index + 1
    return -1


def _moves(body: str, marked: bool) -> list[str] | None:
    inner = body[1:-1]
    if "[" in inner or "]" in inner:
        return None
    tokens = [token.strip("'\"`") for token in _TOKEN_SPLIT.split(inner.strip()) if token]
    tokens = [token for token in tokens if token]
    moves = [canonical_move(token) for token in tokens]
    if marked:
        return [move or token for move, token in zip(moves, tokens, strict=True)]
    if not tokens or None in moves:
        return None
    return [move for move in moves if move is not None]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sudoku(body: str, marked: bool) -> list[list[int]] | None:
    body = body.translate(_TUPLES_AS_LISTS)  # Python prints fills as tuples: [(0, 1, 3), ...]
    if _NUMBERS.fullmatch(body) is None:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(item, list) for item in value):
        return None
    if not all(_is_int(number) for item in value for number in item):
        return None
    is_grid = len(value) in GRID_SIZES and all(len(row) == len(value) for row in value)
    is_fills = all(len(item) == 3 for item in value) and (marked or bool(value))
    return value if is_grid or is_fills else None


def _candidates(text: str) -> list[tuple[int, bool]]:
    """(position of an opening bracket, marked) for every place a list may start."""
    found = [(match.end(), True) for match in _MARKED.finditer(text)]
    found += [(match.end(), False) for match in _BARE.finditer(text)]
    return sorted(found)


def parse_actions(env: str, text: str) -> list[Any] | None:
    """The last action list in `text` for `env`; None when nothing parses."""
    environment(env)
    if not isinstance(text, str):
        return None
    found: list[Any] | None = None
    covered_until = -1
    for start, marked in _candidates(text):
        if start < covered_until:  # inside a list already read (a grid's rows, say)
            continue
        end = _closing_bracket(text, start)
        if end < 0:
            continue
        if not marked and _LINE_END.match(text, end) is None:
            continue  # a bare list must be all that is on its line
        body = text[start:end]
        parsed = _sudoku(body, marked) if env == "sudoku" else _moves(body, marked)
        if parsed is not None:
            found, covered_until = parsed, end
    return found


def format_actions(env: str, actions: Sequence[Any]) -> str:
    """Canonical text of an action list: "[U, D]" or "[[1,2,3,4],...]" / "[[0,1,3],...]"."""
    environment(env)
    if isinstance(actions, str) or not isinstance(actions, Sequence):
        raise MarsError(f"{env}: an action list is a list, got {actions!r}")
    if env == "sudoku":
        return "[" + ",".join("[" + ",".join(str(v) for v in item) + "]" for item in actions) + "]"
    return "[" + ", ".join(canonical_move(action) or str(action) for action in actions) + "]"
