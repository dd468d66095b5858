"""Positions rebuilt from arena records (`games.positions`) and drawn as HTML (`dashboard.boards`).

The replay is checked against what the seats were shown during play: a model seat's prompt holds
its own card (poker) or its partner's hand (Hanabi), rendered from the live game state, so the
replayed position must name the same cards.
"""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from core.errors import MarsError
from dashboard.boards import COLORS, board_html, positions_for
from games.arena import ArenaConfig, run_arena
from games.engine import EpisodeOptions
from games.players import PlayerContext, make_player
from games.positions import replay_positions
from games.rules import PlayRules
from games.spec import get_game
from games.testing import first_legal, scripted_player

RANK_TRIPLES = PlayRules(leduc_deals="rank_triples")  # the MARSHAL code's Leduc deals


def arena_records(
    game: str, opponent: str, episodes: int, options: EpisodeOptions | None = None
) -> list[dict[str, Any]]:
    """Records of a scripted model (first legal move) against a bot, from both seats."""
    spec = get_game(game)
    records: list[dict[str, Any]] = []
    config = ArenaConfig(episodes=episodes, options=options or EpisodeOptions())
    opponent_player = make_player(opponent, PlayerContext(spec=spec))
    asyncio.run(
        run_arena(
            spec, scripted_player(first_legal), opponent_player, config, on_record=records.append
        )
    )
    return records


def ttt_record(actions: list[str | None], seed: int = 0) -> dict[str, Any]:
    turns = []
    for k, action in enumerate(actions):
        turns.append({"seat": k % 2, "turn": k // 2, "action": action, "legal": action is not None})
    return {"game": "tic_tac_toe", "seed": seed, "players": ["a", "b"], "turns": turns}


class _Cells(HTMLParser):
    """data-cell -> data-mark (and which cell carries data-move) of a drawn grid."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: dict[str, str] = {}
        self.moves: dict[str, str] = {}
        self.last: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        cell = found.get("data-cell")
        if cell is not None:
            self.marks[cell] = found.get("data-mark") or ""
            if found.get("data-move"):
                self.moves[cell] = str(found["data-move"])
            if found.get("data-last"):
                self.last.append(cell)


def cells(html: str) -> _Cells:
    parser = _Cells()
    parser.feed(html)
    return parser


def test_tic_tac_toe_positions_follow_the_moves_and_an_invalid_reply_changes_nothing() -> None:
    record = ttt_record(["<X(1,1)>", "<O(0,0)>", "<X(0,2)>", None])
    positions = replay_positions(record)
    assert len(positions) == 5  # one per turn, then the final position
    assert positions[0]["rows"] == [["", "", ""], ["", "", ""], ["", "", ""]]
    assert positions[0]["move_cell"] == [1, 1] and positions[0]["to_move"] == 0
    assert positions[2]["rows"] == [["o", "", ""], ["", "x", ""], ["", "", ""]]
    assert positions[2]["move_cell"] == [0, 2] and positions[2]["last_cell"] == [0, 0]
    assert positions[3]["action"] is None and positions[3]["move_cell"] is None
    assert (
        positions[3]["rows"]
        == positions[4]["rows"]
        == [["o", "", "x"], ["", "x", ""], ["", "", ""]]
    )
    assert not positions[4]["terminal"]  # the game stopped on the invalid reply, not over
    assert positions[4]["last_cell"] == [0, 2]  # the last move played, not the invalid reply
    assert positions[0]["last_cell"] is None

    drawn = cells(board_html(positions[2], ["model", "random"]))
    assert drawn.marks == {
        f"{r}-{c}": positions[2]["rows"][r][c] for r in range(3) for c in range(3)
    }
    assert drawn.moves == {"0-2": "x"} and drawn.last == ["0-0"]
    html = board_html(positions[2], ["model", "random"])
    assert "first (model) plays <b>&lt;X(0,2)&gt;</b>" in html
    escaped = board_html(positions[3], ["model", "<b>bot</b>"])  # names are escaped
    assert "second (&lt;b&gt;bot&lt;/b&gt;) (no valid move)" in escaped
    assert COLORS["move"] in html and COLORS["x"] in html and COLORS["o"] in html


def test_a_finished_game_is_drawn_as_over() -> None:
    moves = ["<X(0,0)>", "<O(1,0)>", "<X(0,1)>", "<O(1,1)>", "<X(0,2)>"]
    final = replay_positions(ttt_record(moves))[-1]
    assert final["terminal"] and final["to_move"] is None and final["rows"][0] == ["x", "x", "x"]
    assert "game over" in board_html(final)


def test_connect_four_discs_fall_to_the_lowest_empty_cell() -> None:
    record = {
        "game": "connect_four",
        "seed": 0,
        "turns": [
            {"seat": 0, "action": "<X3>", "legal": True},
            {"seat": 1, "action": "<O3>", "legal": True},
            {"seat": 0, "action": "<X4>", "legal": True},
        ],
    }
    positions = replay_positions(record)
    assert positions[0]["move_cell"] == [5, 3]
    assert positions[1]["move_cell"] == [4, 3]  # on top of the first disc
    assert positions[2]["rows"][4][3] == "o" and positions[2]["rows"][5][3] == "x"
    drawn = cells(board_html(positions[2]))
    assert len(drawn.marks) == 42 and drawn.marks["4-3"] == "o" and drawn.moves == {"5-4": "x"}
    assert COLORS["c4_board"] in board_html(positions[2])


def _shown(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return match.group(1)


@pytest.mark.parametrize(
    ("game", "opponent", "rules", "card_line"),
    [
        ("kuhn_poker", "random", None, r"Your card: (\w+)"),
        ("leduc_poker", "random", None, r"Your private card: (\w+)"),
        ("leduc_poker", "random", RANK_TRIPLES, r"Your private card: (\w+)"),
    ],
)
def test_poker_positions_hold_the_cards_each_seat_was_shown(
    game: str, opponent: str, rules: Any, card_line: str
) -> None:
    options = EpisodeOptions(rules=rules) if rules else EpisodeOptions()
    records = arena_records(game, opponent, 6, options)
    deals = rules.leduc_deals if rules else None
    checked = 0
    for record in records:
        model = 0 if record["seat"] == "first" else 1
        positions = replay_positions(record, deals)
        assert len(positions) == len(record["turns"]) + 1
        for turn, position in zip(record["turns"], positions, strict=False):
            assert position["to_move"] == turn["seat"] and position["action"] == turn["action"]
            if turn["seat"] != model or "prompt" not in turn:
                continue
            shown = turn["prompt"][-1]["content"]
            assert position["cards"][model] == _shown(card_line, shown)
            if game == "leduc_poker":
                public = re.search(r"Public card: (\w\w)\b", shown)
                assert position["public"] == (public.group(1) if public else None)
                chips = _shown(r"Chips in the pot: you (\d+)", shown)
                assert position["chips"][model] == int(chips)
            checked += 1
        final = positions[-1]
        assert final["terminal"] and final["pot"] == sum(final["chips"])
        assert sum(len(r) for r in final["betting"]) == len(record["turns"])
    assert checked >= 6


def test_leduc_under_the_wrong_deal_rule_does_not_replay_the_same_cards() -> None:
    records = arena_records("leduc_poker", "random", 6, EpisodeOptions(rules=RANK_TRIPLES))
    differing = 0
    for record in records:
        right = replay_positions(record, "rank_triples")[0]["cards"]
        try:
            wrong = replay_positions(record, "natural")[0]["cards"]
        except MarsError:
            continue  # a move the other deal makes illegal: refused, also fine
        differing += right != wrong
    assert differing > 0


def test_kuhn_chips_and_betting() -> None:
    record = {
        "game": "kuhn_poker",
        "seed": 4,  # deal 4: first gets K... whatever it is, both cards differ
        "turns": [
            {"seat": 0, "action": "<PASS>", "legal": True},
            {"seat": 1, "action": "<BET>", "legal": True},
            {"seat": 0, "action": "<BET>", "legal": True},
        ],
    }
    positions = replay_positions(record)
    assert [p["chips"] for p in positions] == [[1, 1], [1, 1], [1, 2], [2, 2]]
    assert positions[-1]["betting"] == [[[0, "<PASS>"], [1, "<BET>"], [0, "<BET>"]]]
    assert len(set(positions[0]["cards"])) == 2 and set(positions[0]["cards"]) <= set("JQK")
    html = board_html(positions[2], ["model", "cfr"])
    for card in positions[2]["cards"]:
        assert f'data-card="{card}"' in html
    assert 'data-chips="2"' in html and "pot: <b>3</b>" in html
    assert 'data-seat="0" data-active="1"' in html  # the seat to act is framed


def test_hanabi_positions_hold_the_hand_the_partner_was_shown() -> None:
    records = arena_records("mini_hanabi", "random", 3)
    checked = 0
    for record in records:
        model = 0 if record["seat"] == "first" else 1
        positions = replay_positions(record)
        for turn, position in zip(record["turns"], positions, strict=False):
            if turn["seat"] != model or "prompt" not in turn:
                continue
            shown = turn["prompt"][-1]["content"].split("Your partner's hand:")[1]
            partner = re.findall(r"card \d+: (\w\w) ", shown)
            assert [c["card"] for c in position["hands"][1 - model]] == partner
            lives = int(_shown(r"Life tokens: (\d+)", turn["prompt"][-1]["content"]))
            assert position["life_tokens"] == lives
            checked += 1
        final = positions[-1]
        assert final["score"] == sum(final["fireworks"].values())
    assert checked >= 3

    position = replay_positions(records[0])[0]
    html = board_html(position, ["model", "random"])
    assert f'data-info="{position["info_tokens"]}/3"' in html
    assert f'data-lives="{position["life_tokens"]}/3"' in html
    for card in position["hands"][0] + position["hands"][1]:
        assert f'data-hanabi-card="{card["card"]}"' in html


def test_hanabi_moves_mark_the_cards_they_are_about() -> None:
    hand = [{"card": c, "hinted": "XX", "colors": "RY", "ranks": "12"} for c in ("R1", "Y1", "R2")]
    position = {"game": "mini_hanabi", "kind": "hanabi", "hands": [hand, hand], "to_move": 0,
                "terminal": False, "fireworks": {"R": 0, "Y": 0}}  # fmt: skip
    marked = "data-move"
    hint = board_html(position | {"action": "<Reveal color R>"})
    assert hint.count(marked) == 2  # the partner's two red cards
    assert board_html(position | {"action": "<Reveal rank 2>"}).count(marked) == 1
    assert board_html(position | {"action": "<Discard card 2>"}).count(marked) == 1
    assert board_html(position | {"action": None}).count(marked) == 0


def test_records_that_do_not_replay_say_why() -> None:
    illegal = ttt_record(["<X(1,1)>", "<O(1,1)>"])  # the cell is taken
    with pytest.raises(MarsError, match=r"turn 1: <O\(1,1\)> is not legal in the replayed"):
        replay_positions(illegal)
    positions, why = positions_for(illegal)
    assert positions is None and "not legal in the replayed position" in why
    for bad, message in (
        ({"game": "chess", "seed": 0, "turns": []}, "unknown game"),
        ({"game": "tic_tac_toe", "turns": []}, "no episode seed"),
        ({"game": "tic_tac_toe", "seed": 0, "turns": [{"action": "<X(9,9)>"}]}, "not legal"),
        (
            {"game": "tic_tac_toe", "seed": 0, "turns": [{"seat": 1, "action": "<O(0,0)>"}]},
            "seat 1 moves, the replay has seat 0",
        ),
    ):
        positions, why = positions_for(bad)
        assert positions is None and message in why, why
    good, why = positions_for(ttt_record(["<X(0,0)>"]), {"leduc_deals": "natural"})
    assert why == "" and good is not None and len(good) == 2
