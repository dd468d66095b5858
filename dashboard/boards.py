"""Boards for game replays: each turn's position drawn as HTML.

Positions come from `games.positions.replay_positions`, which replays the record's seed and
moves in OpenSpiel (the one place the dashboard uses game code: imported when a replay is first
drawn, so the other pages never load OpenSpiel). This module only turns those plain dicts into
markup: no Streamlit, no files, so every drawing is testable as a string.

It draws board kinds, never games: a position says its `kind` (`grid`, `poker`, `hanabi`, or
`text`, OpenSpiel's state string) and its `style` (the options its game's `Board` declares, e.g. a
grid's `pieces`: "marks" or "discs"), so a game added to games/catalog/ is drawn with no line here.

The drawing is plain HTML with inline styles (CSS grids, bordered boxes, round discs): Streamlit's
`st.html` sanitises its input and drops inline SVG, while styled elements pass. Colours are fixed
per element (`COLORS`), so a screenshot can be checked pixel by pixel, and every cell, card and
token carries `data-*` attributes naming what it shows.
"""

from __future__ import annotations

import functools
import re
from html import escape
from typing import Any

COLORS = {
    "ttt_board": "#e8d5a9",  # Tic-Tac-Toe: the board behind the cells
    "ttt_cell": "#fbf3e0",
    "x": "#b0172b",  # X marks, x discs
    "o": "#1457a8",  # O marks
    "c4_board": "#1f4e9c",  # Connect Four: the frame, holes, discs
    "c4_hole": "#f4f6fb",
    "c4_x": "#d7261e",
    "c4_o": "#f5c518",
    "move": "#ffe066",  # the cell this turn's move takes
    "last": "#2e7d32",  # outline of the previous move
    "card": "#ffffff",
    "card_back": "#7b3f98",
    "ink": "#222222",
    "red_suit": "#c62828",
    "chip": "#2e7d32",
    "info_token": "#1e88e5",
    "life_token": "#e53935",
    "to_move": "#ff9800",  # the frame around the seat to act
    "target": "#ff3d00",  # Hanabi: the card played or discarded, the cards a hint reveals
}
HANABI_COLORS = {
    "R": "#e53935",
    "Y": "#fdd835",
    "G": "#43a047",
    "W": "#f5f5f5",
    "B": "#1e88e5",
}
SEAT_TITLES = ("first", "second")


# --------------------------------------------------------------------------- positions


@functools.lru_cache(maxsize=64)
def _replay(record_json: str, leduc_deals: str | None) -> tuple[tuple[dict, ...] | None, str]:
    import json

    from core.errors import MarsError
    from games.positions import replay_positions  # OpenSpiel loads with the first replay

    try:
        positions = replay_positions(json.loads(record_json), leduc_deals)  # type: ignore[arg-type]
    except MarsError as exc:
        return None, str(exc)
    except Exception as exc:  # a damaged record must not break the page
        return None, f"{type(exc).__name__}: {exc}"
    return tuple(positions), ""


def positions_for(
    record: dict[str, Any], rules: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]] | None, str]:
    """(one position per turn plus the final one, "") or (None, why the record does not replay).

    `rules`: the run's `config.rules` (its Leduc deal rule decides the deals)."""
    import json

    deals = (rules or {}).get("leduc_deals") if isinstance(rules, dict) else None
    try:
        text = json.dumps(record, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        return None, f"the record cannot be read: {exc}"
    positions, why = _replay(text, deals if isinstance(deals, str) else None)
    return (list(positions), "") if positions is not None else (None, why)


# --------------------------------------------------------------------------- drawing


def _attrs(data: dict[str, Any]) -> str:
    return "".join(
        f' data-{name.replace("_", "-")}="{escape(str(value))}"' for name, value in data.items()
    )


def _box(style: str, content: str = "", **data: Any) -> str:
    return f'<div style="{style}"{_attrs(data)}>{content}</div>'


def _disc(colour: str, size: int, *, hollow: bool = False, **data: Any) -> str:
    fill = f"border: 2px solid {colour};" if hollow else f"background: {colour};"
    style = (
        f"display: inline-block; width: {size}px; height: {size}px; border-radius: 50%; "
        f"{fill} margin: 2px; box-sizing: border-box; vertical-align: middle;"
    )
    return _box(style, **data)


def board_html(position: dict[str, Any], players: list[str] | None = None) -> str:
    """The position as HTML: the board, then who is to move and what they play."""
    kind = position.get("kind")
    names = _seat_names(players)
    if kind == "grid":
        body = grid_html(position)
    elif kind == "poker":
        body = poker_html(position, names)
    elif kind == "hanabi":
        body = hanabi_html(position, names)
    elif kind == "text":
        body = text_html(position)
    else:
        return f"<div>no drawing for {escape(str(kind))}</div>"
    status = _box("margin-top: 6px; font-size: 14px;", _status(position, names))
    return (
        f'<div class="mars-board" data-game="{escape(str(position.get("game")))}" '
        f'style="font-family: sans-serif; color: {COLORS["ink"]};">{body}{status}</div>'
    )


def _seat_names(players: list[str] | None) -> list[str]:
    names = []
    for seat, title in enumerate(SEAT_TITLES):
        who = players[seat] if players and seat < len(players) else ""
        names.append(f"{title} ({who})" if who else title)
    return names


def _status(position: dict[str, Any], names: list[str]) -> str:
    if position.get("terminal"):
        return "<b>game over</b>"
    seat = position.get("to_move")
    mover = names[seat] if isinstance(seat, int) and 0 <= seat < len(names) else "-"
    action = position.get("action")
    move = f" plays <b>{escape(action)}</b>" if action else " (no valid move)"
    return f"to move: {escape(mover)}{move}"


def _style(position: dict[str, Any]) -> dict[str, Any]:
    style = position.get("style")
    return style if isinstance(style, dict) else {}


def text_html(position: dict[str, Any]) -> str:
    """A game that declares no board: OpenSpiel's state string as it is."""
    return _box(
        f"font-family: monospace; white-space: pre; padding: 6px; "
        f"background: {COLORS['ttt_cell']}; border-radius: 6px; width: max-content;",
        escape(str(position.get("text") or "")),
        board=position.get("game"),
    )


def grid_html(position: dict[str, Any]) -> str:
    """Marks (Tic-Tac-Toe: row and column numbers) or falling discs (`pieces: discs`, Connect
    Four: column numbers) on a CSS grid."""
    rows: list[list[str]] = position.get("rows") or []
    if not rows or not rows[0]:
        return "<div>empty board</div>"
    discs = _style(position).get("pieces") == "discs"
    size = 48 if discs else 64
    n_cols = len(rows[0])
    move, last = position.get("move_cell"), position.get("last_cell")
    mover = "x" if position.get("to_move") == 0 else "o"
    cells = []
    for r, row in enumerate(rows):
        for c, mark in enumerate(row):
            is_move, is_last = move == [r, c], last == [r, c]
            data = {"cell": f"{r}-{c}", "mark": mark}
            if is_move:
                data["move"] = mover
            if is_last:
                data["last"] = 1
            if discs:
                cells.append(_c4_cell(mark, mover if is_move else "", is_last, size, data))
            else:
                cells.append(_ttt_cell(mark, mover if is_move else "", is_last, size, data))
    board = COLORS["c4_board"] if discs else COLORS["ttt_board"]
    grid = _box(
        f"display: grid; grid-template-columns: repeat({n_cols}, {size}px); gap: 4px; "
        f"padding: 6px; background: {board}; border-radius: 6px; width: max-content;",
        "".join(cells),
        board=position.get("game"),
    )
    numbers = "".join(
        _box(f"width: {size}px; text-align: center; font-size: 12px;", str(c))
        for c in range(n_cols)
    )
    columns = f"display: grid; grid-template-columns: repeat({n_cols}, {size}px); gap: 4px;"
    header = _box(f"{columns} padding: 0 6px;", numbers)
    if discs:
        return header + grid
    row_numbers = "".join(
        _box(f"height: {size}px; line-height: {size}px; font-size: 12px;", str(r))
        for r in range(len(rows))
    )
    side = _box("display: grid; gap: 4px; padding: 6px 4px 6px 0;", row_numbers)
    return _box("margin-left: 14px;", header) + _box(
        "display: flex; align-items: flex-start;", side + grid
    )


def _ttt_cell(mark: str, move: str, is_last: bool, size: int, data: dict[str, Any]) -> str:
    shown = mark or move
    colour = COLORS["x"] if shown == "x" else COLORS["o"]
    background = COLORS["move"] if move else COLORS["ttt_cell"]
    outline = f"box-shadow: inset 0 0 0 3px {COLORS['last']};" if is_last else ""
    faded = "opacity: 0.6;" if move and not mark else ""
    text = _box(faded, escape(shown.upper())) if shown else ""
    style = (
        f"width: {size}px; height: {size}px; background: {background}; border-radius: 4px; "
        f"display: flex; align-items: center; justify-content: center; font-size: {size * 0.7}px; "
        f"font-weight: 900; line-height: 1; color: {colour}; {outline}"
    )
    return _box(style, text, **data)


def _c4_cell(mark: str, move: str, is_last: bool, size: int, data: dict[str, Any]) -> str:
    disc = {"x": COLORS["c4_x"], "o": COLORS["c4_o"]}
    fill = disc.get(mark, COLORS["move"] if move else COLORS["c4_hole"])
    outline = f"box-shadow: 0 0 0 3px {COLORS['last']};" if is_last else ""
    inner = ""
    if move and not mark:  # the disc being dropped, smaller, over the highlighted hole
        inner = _disc(disc[move], int(size * 0.5))
    style = (
        f"width: {size}px; height: {size}px; border-radius: 50%; background: {fill}; "
        f"display: flex; align-items: center; justify-content: center; {outline}"
    )
    return _box(style, inner, **data)


def _card(card: str | None, *, width: int = 44, height: int = 64) -> str:
    """A playing card: rank and suit (Leduc's s and h as spades and hearts), or its back."""
    frame = (
        f"display: inline-flex; flex-direction: column; align-items: center; "
        f"justify-content: center; width: {width}px; height: {height}px; border-radius: 6px; "
        f"border: 1px solid {COLORS['ink']}; margin: 2px; vertical-align: middle;"
    )
    if not card:
        return _box(f"{frame} background: {COLORS['card_back']};", card="hidden")
    rank, suit = card[0], card[1:]
    symbol = {"s": "\u2660", "h": "\u2665"}.get(suit, "")
    ink = COLORS["red_suit"] if suit == "h" else COLORS["ink"]
    content = _box(f"font-size: 26px; font-weight: 700; color: {ink};", escape(rank))
    if symbol:
        content += _box(f"font-size: 16px; color: {ink};", symbol)
    return _box(f"{frame} background: {COLORS['card']};", content, card=card)


def _chips(count: Any) -> str:
    """One green disc per chip committed."""
    count = max(0, int(count or 0))
    discs = "".join(_disc(COLORS["chip"], 12) for _ in range(count))
    return _box("max-width: 90px; line-height: 0;", discs, chips=count)


def _frame(active: bool) -> str:
    colour = COLORS["to_move"] if active else "#cccccc"
    return f"border: 3px solid {colour}; border-radius: 8px; padding: 6px; margin: 4px;"


def poker_html(position: dict[str, Any], names: list[str]) -> str:
    """Each seat's card and committed chips (the seat to act framed), the public card, the pot
    and the betting so far."""
    cards = position.get("cards") or [None, None]
    chips = position.get("chips") or [0, 0]
    seats = []
    for seat in range(2):
        active = position.get("to_move") == seat
        card = cards[seat] if seat < len(cards) else None
        chip = chips[seat] if seat < len(chips) else 0
        content = (
            _box("font-weight: 700;", escape(names[seat]))
            + _card(card)
            + _box("", f"chips in: {int(chip or 0)}")
            + _chips(chip)
        )
        seats.append(
            _box(
                f"{_frame(active)} min-width: 110px;",
                content,
                seat=seat,
                active=int(active),
            )
        )
    middle = ""
    if _style(position).get("public_card"):
        public = position.get("public")
        caption = "public card" if public else "public card (not dealt yet)"
        middle = _box(
            "margin: 4px 8px; text-align: center;",
            _box("", caption) + _card(public),
            public=public or "",
        )
    lines = []
    for number, moves in enumerate(position.get("betting") or [], start=1):
        said = ", ".join(
            f"{escape(SEAT_TITLES[seat] if seat in (0, 1) else '?')} {escape(str(label))}"
            for seat, label in moves
        )
        lines.append(_box("", f"round {number}: {said or 'no bets yet'}"))
    pot = _box("margin-top: 4px;", f"pot: <b>{int(position.get('pot') or 0)}</b>")
    table = _box(
        "display: flex; flex-wrap: wrap; align-items: flex-start;", seats[0] + middle + seats[1]
    )
    return table + pot + "".join(lines)


_HANABI_MOVE = re.compile(r"<(Play|Discard) card (\d+)>|<Reveal (color|rank) (\w+)>")


def _hanabi_targets(position: dict[str, Any]) -> set[tuple[int, int]]:
    """(seat, card index) the turn's move is about: the card played or discarded, or the
    partner's cards a hint reveals."""
    match = _HANABI_MOVE.fullmatch(str(position.get("action") or ""))
    mover = position.get("to_move")
    hands = position.get("hands") or []
    if match is None or mover not in (0, 1) or len(hands) != 2:
        return set()
    if match.group(1):
        return {(mover, int(match.group(2)) - 1)}
    partner, value = 1 - mover, match.group(4)
    slot = 0 if match.group(3) == "color" else 1
    return {
        (partner, k)
        for k, card in enumerate(hands[partner])
        if str(card.get("card") or "  ")[slot] == value
    }


def _hanabi_card(card: dict[str, Any], targeted: bool = False) -> str:
    text = str(card.get("card") or "XX")
    colour = HANABI_COLORS.get(text[0], "#9e9e9e")
    rank = text[1:] if len(text) > 1 else "?"
    hinted = str(card.get("hinted") or "XX")
    known = [ch for ch in hinted[:2] if ch not in ("X", "")]
    hint = "knows " + "".join(known) if known else "&nbsp;"
    ring = f"box-shadow: 0 0 0 4px {COLORS['target']};" if targeted else ""
    face = _box(
        f"display: flex; align-items: center; justify-content: center; width: 44px; "
        f"height: 60px; border-radius: 6px; border: 1px solid {COLORS['ink']}; "
        f"background: {colour}; font-size: 24px; font-weight: 700; {ring}",
        escape(rank),
    )
    data = {"hanabi_card": text, "hinted": hinted} | ({"move": 1} if targeted else {})
    return _box(
        "display: inline-block; margin: 4px; text-align: center; font-size: 10px;",
        face + _box("", hint),
        **data,
    )


def _tokens(available: int, total: int, colour: str, name: str) -> str:
    total = max(total, available, 0)
    discs = "".join(_disc(colour, 14, hollow=k >= available) for k in range(total))
    return _box("display: inline-block;", discs, **{name: f"{available}/{total}"})


def hanabi_html(position: dict[str, Any], names: list[str]) -> str:
    """The fireworks, the tokens, both hands face up (the seat to act framed), deck, discards."""
    fireworks = position.get("fireworks") or {}
    piles = "".join(
        _box(
            f"display: inline-flex; align-items: center; justify-content: center; width: 36px; "
            f"height: 36px; margin: 2px; border-radius: 6px; border: 1px solid {COLORS['ink']}; "
            f"background: {HANABI_COLORS.get(colour, '#9e9e9e')}; font-weight: 700;",
            str(int(level)),
            firework=f"{colour}{int(level)}",
        )
        for colour, level in sorted(fireworks.items())
    )
    hands = []
    targets = _hanabi_targets(position)
    for seat, hand in enumerate(position.get("hands") or []):
        active = position.get("to_move") == seat
        name = names[seat] if seat < len(names) else str(seat)
        title = _box("", f"<b>{escape(name)}</b> (its cards, which it does not see)")
        cards = "".join(_hanabi_card(card, (seat, k) in targets) for k, card in enumerate(hand))
        hands.append(_box(_frame(active), title + cards, seat=seat, active=int(active)))
    tokens = _box(
        "",
        "info tokens "
        + _tokens(
            int(position.get("info_tokens") or 0),
            int(position.get("max_info_tokens") or 0),
            COLORS["info_token"],
            "info",
        )
        + " lives "
        + _tokens(
            int(position.get("life_tokens") or 0),
            int(position.get("max_life_tokens") or 0),
            COLORS["life_token"],
            "lives",
        ),
    )
    discards = ", ".join(escape(str(card)) for card in position.get("discards") or []) or "none"
    score = _box("", f"fireworks (score <b>{int(position.get('score') or 0)}</b>) {piles}")
    rest = _box("", f"deck: {int(position.get('deck') or 0)} cards · discards: {discards}")
    return score + tokens + "".join(hands) + rest
