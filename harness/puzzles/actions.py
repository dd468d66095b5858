"""Action lists in a reply, and their canonical text.

A list is found after a marker (`#### [...]`, or with words between as in `#### Moves: [...]`;
`**Actions List**: [...]`; `Actions: [...]`) or as a line that is only a list; the LAST one
that parses wins. Grid puzzles take the tokens U/D/L/R (or up/down/left/right, any case); after
a marker an unknown token is kept (applying it is an invalid move, as the reference's reward
table has it), while a bare line counts only when every token is a move. Sudoku takes a full
grid (N rows of N integers) or fills [[row, column, value], ...] with 0-based rows and columns
(tuples as Python prints them are read as lists). One list is at most `MAX_LIST_CHARS` long.

The parse is linear in the reply's length whatever the reply (it is untrusted input, parsed
inline in grading and in the training rewards; tests/test_parsers_linear.py): regular
expressions that backtrack over any character a bounded number of times find the lists whose
brackets can hold an answer (a move list has no bracket inside, a Sudoku list is a list of flat
lists), so the lists read overlap at most two deep; they are tried from the last, and a list
that failed is not read again. A marker is looked for only before the '[' that follows a marker
word ("####", "actions"), reading the text backwards from that '[' (`_MARKED_BEFORE`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from core.errors import MarsError
from harness.puzzles.levels import environment
from harness.puzzles.moves import canonical_move

# A marker is one of `####[^\[\n]*`, `\*\*\s*actions\s+list\s*:?\s*\*\*\s*:?` or
# `\bactions\s*:`, then `[ \t]*` up to the list's '['. A marker holds no '[', so it ends at the
# first '[' after it: the patterns below are those markers written backwards, matched on the
# reversed text at that '['. Between two repeated character classes there is always a character
# of neither (':', '*', a letter), so a failed match backtracks over each run of spaces once.
_MARKER_WORD = re.compile(r"####|actions", re.I)
_MARKED_BEFORE = re.compile(
    r"[^\[\n]*####"
    r"|(?:[ \t]*:\s*|\s*)\*\*(?:\s*:\s*|\s*)tsil\s+snoitca\s*\*\*"
    r"|[ \t]*:\s*snoitca(?!\w)",
    re.I,
)
_LIST_END = r"(?=[ \t.;]*(?:\n|$))"  # what may follow a bare list on its line
# A move list has no bracket inside; a bare one (alone on its line) names at least one move.
_MOVE_LIST = re.compile(r"\[[^\[\]]*\]")
_BARE_MOVE_LIST = re.compile(r"^[ \t]*(\[[,\s'\"`]*[^\[\],\s'\"`][^\[\]]*\])" + _LIST_END, re.M)
# A Sudoku list (tuples read as lists) is a list of flat lists; a bare one holds at least one.
_ROW = r"[\[(][^\[\]()]*[\])]"
_SUDOKU_LIST = re.compile(rf"\[(?:[^\[\]()]|{_ROW})*\]")
_BARE_SUDOKU_LIST = re.compile(
    rf"^[ \t]*(\[[^\[\]()]*{_ROW}(?:[^\[\]()]|{_ROW})*\])" + _LIST_END, re.M
)
_NUMBERS = re.compile(r"[\[\]\d\s,+-]*")
_SQUARE = re.compile(r"[\[\]]")
_TOKEN_SPLIT = re.compile(r"[,\s]+")
_TUPLES_AS_LISTS = str.maketrans("()", "[]")
MAX_LIST_CHARS = 20_000
GRID_SIZES = (4, 9)


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
    if "(" in body or ")" in body:  # Python prints fills as tuples: [(0, 1, 3), ...]
        body = body.translate(_TUPLES_AS_LISTS)
    # A quick count first: fills have 3 numbers each (3k - 1 commas), a grid N rows of N (N*N - 1).
    rows, commas = body.count("[") - 1, body.count(",")
    if rows and commas != 3 * rows - 1 and not (rows in GRID_SIZES and commas == rows * rows - 1):
        return None
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


def _marked_starts(text: str) -> list[int]:
    """The '[' of every list that follows a marker, in order."""
    starts: list[int] = []
    backwards = ""
    bracket = -1
    for word in _MARKER_WORD.finditer(text):
        if word.start() < bracket:
            continue  # the '[' after it is the one the previous word led to
        bracket = text.find("[", word.end())
        if bracket < 0:
            break
        backwards = backwards or text[::-1]
        if _MARKED_BEFORE.match(backwards, len(text) - bracket):
            starts.append(bracket)
    return starts


def _square_closed_at_end(body: str) -> bool:
    """Whether the ']' that closes a Sudoku list's first '[' is its last character (tuples read
    as lists, it is; counting square brackets alone, it may not be: "[(1,2,3]...")."""
    if "(" not in body and ")" not in body:
        return True
    depth = 0
    for bracket in _SQUARE.finditer(body, 0, len(body) - 1):
        depth += 1 if bracket.group() == "[" else -1
        if depth == 0:
            return False
    return depth == 1


def _lists(text: str, sudoku: bool) -> tuple[list[int], dict[int, int]]:
    """Every list that may hold an answer, by its bracket structure and where it stands (after
    a marker, or alone on its line): `start * 2 + marked` for each, and start -> end. A list
    longer than MAX_LIST_CHARS does not count. (Plain ints: a reply may hold a million lists, and
    a million tuples would cost the garbage collector more than the parse.)"""
    shape, bare_shape = (
        (_SUDOKU_LIST, _BARE_SUDOKU_LIST) if sudoku else (_MOVE_LIST, _BARE_MOVE_LIST)
    )
    keys: list[int] = []
    ends: dict[int, int] = {}
    for start in _marked_starts(text):
        if (match := shape.match(text, start)) is not None:
            keys.append(start * 2 + 1)
            ends[start] = match.end()
    for match in bare_shape.finditer(text):
        keys.append(match.start(1) * 2)
        ends[match.start(1)] = match.end(1)
    fits = {
        start
        for start, end in ends.items()
        if end - start <= MAX_LIST_CHARS and (not sudoku or _square_closed_at_end(text[start:end]))
    }
    return [key for key in keys if key >> 1 in fits], ends


def parse_actions(env: str, text: str) -> list[Any] | None:
    """The last action list in `text` for `env`; None when nothing parses."""
    environment(env)
    if not isinstance(text, str):
        return None
    sudoku = env == "sudoku"
    keys, ends = _lists(text, sudoku)
    failed: tuple[set[str], set[str]] = (set(), set())  # a reply may repeat one list many times
    # The last list that parses wins. No list is read inside another that parses (one that
    # parses holds no marker, and no bare list that parses), so they are tried from the last.
    for key in sorted(keys, reverse=True):
        start, marked = key >> 1, key & 1
        body = text[start : ends[start]]
        if body in failed[marked]:
            continue
        parsed = _sudoku(body, bool(marked)) if sudoku else _moves(body, bool(marked))
        if parsed is not None:
            return parsed
        failed[marked].add(body)
    return None


def format_actions(env: str, actions: Sequence[Any]) -> str:
    """Canonical text of an action list: "[U, D]" or "[[1,2,3,4],...]" / "[[0,1,3],...]"."""
    environment(env)
    if isinstance(actions, str) or not isinstance(actions, Sequence):
        raise MarsError(f"{env}: an action list is a list, got {actions!r}")
    if env == "sudoku":
        return "[" + ",".join("[" + ",".join(str(v) for v in item) + "]" for item in actions) + "]"
    return "[" + ", ".join(canonical_move(action) or str(action) for action in actions) + "]"
