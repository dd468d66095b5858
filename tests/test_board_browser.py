"""The replay's board in a real browser: `mars dashboard` served, the Games page opened in headless
Chromium at one turn of a recorded Tic-Tac-Toe game (`?turn=4`), and the screenshot read pixel by
pixel at every cell of the board (Chromium is driven as in test_dashboard_browser.py, by
dashboard/browser.py).

The game is a real `mars arena` run: a scripted model (a reasoning text, then the first legal
move) as X against `tactics:first` as O. What each cell must show comes from replaying the record
(`games.positions`, itself checked against the prompts in test_boards.py).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, mars_env, run_mars

from dashboard.boards import COLORS
from dashboard.browser import CHROMIUM, Browser, serve
from dashboard.dom import dom_text
from games.positions import replay_positions
from games.prompts import legal_actions_in
from harness.testing.scripted_server import Reply, ScriptedServer

# The browser tests start the dashboard as a user does: `mars dashboard`.
MARS_DASHBOARD = [sys.executable, "-m", "mars", "dashboard"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (`make test` installs it as root)"
)
ARTIFACTS = REPO / "test-artifacts" / "board"
TURN = 4  # X's third move: two marks of each side on the board, the move highlighted
REASONING = "The centre row is open; I keep to the first free cell."
CELL, GAP, PAD = 64, 4, 6  # dashboard/boards.py: grid_html for Tic-Tac-Toe


def reply(request: dict[str, Any]) -> Reply:
    legal = legal_actions_in(request["messages"][-1]["content"])
    return Reply(text=f"<answer>{legal[0]}</answer>", reasoning=REASONING)


def rgb(hex_colour: str) -> tuple[int, int, int]:
    value = hex_colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def _board_box(image: Any) -> tuple[int, int, int, int] | None:
    """The bounding box of the board's own colour (the grid behind the cells)."""
    board = rgb(COLORS["ttt_board"])
    width, height = image.size
    pixels = image.load()
    xs, ys = [], []
    for y in range(0, height, 2):
        for x in range(0, width, 2):
            if pixels[x, y] == board:
                xs.append(x)
                ys.append(y)
    if len(xs) < 500:
        return None
    return min(xs), min(ys), max(xs), max(ys)


def _count(image: Any, box: tuple[int, int, int, int], colour: tuple[int, int, int]) -> int:
    pixels = image.load()
    x0, y0, x1, y1 = box
    return sum(1 for y in range(y0, y1) for x in range(x0, x1) if pixels[x, y] == colour)


def test_the_replay_draws_the_board_at_a_turn_beside_the_reply(tmp_path: Path) -> None:
    from PIL import Image

    root = tmp_path / "runs"
    run_dir = root / "arena-board"
    with ScriptedServer(reply, model="scripted") as server:
        played = run_mars(
            "arena", "--game", "tic_tac_toe", "--player", "llm", "--model", "scripted",
            "--base-url", server.base_url, "--opponent", "tactics:first", "--episodes", "1",
            "--seats", "first", "--run-dir", str(run_dir), "--quiet",
        )  # fmt: skip
    assert played.returncode == 0, played.stderr
    record = json.loads((run_dir / "records.jsonl").read_text().splitlines()[0])
    assert len(record["turns"]) > TURN and record["turns"][TURN]["seat"] == 0
    expected = replay_positions(record)[TURN]
    marks = {(r, c): m for r, row in enumerate(expected["rows"]) for c, m in enumerate(row)}
    assert sorted(marks.values()).count("x") == 2 and sorted(marks.values()).count("o") == 2
    move = tuple(expected["move_cell"])

    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    png = ARTIFACTS / "replay-board.png"
    url_path = f"/?page=games&run=arena-board&turn={TURN}"
    with (
        serve(
            root, ARTIFACTS / "dashboard.log", env=mars_env(), cwd=REPO, program=MARS_DASHBOARD
        ) as url,
        Browser(tmp_path / "profile") as browser,
    ):
        # Waits in real time until the replay's turn is drawn (dashboard/browser.py).
        started = time.perf_counter()
        dom = browser.load(url + url_path, [f"turn {TURN}: first (llm)"], height=2600)
        browser.screenshot(png)
        html = dom.html
        image = Image.open(io.BytesIO(png.read_bytes())).convert("RGB")
        box = _board_box(image)
        print(f"\n  board: {png} ({time.perf_counter() - started:.1f} s)")
    (ARTIFACTS / "replay-board.html").write_text(html, encoding="utf-8")
    assert box is not None, "no board drawn in the screenshot"

    # The DOM: every cell with its mark, the move, and the model's reply and reasoning beside.
    for (r, c), mark in marks.items():
        assert f'data-cell="{r}-{c}" data-mark="{mark}"' in html
    assert f'data-cell="{move[0]}-{move[1]}" data-mark="" data-move="x"' in html
    text = dom_text(html)
    assert f"turn {TURN}: first (llm) [player]" in text
    assert record["turns"][TURN]["reply"] in text
    assert f"reasoning ({len(REASONING)} chars)" in text and REASONING in text
    assert f"plays {record['turns'][TURN]['action']}" in text

    # The pixels: the board is 3 x 3 cells of 64 px, 4 px apart, 6 px inside the board colour.
    x0, y0, x1, y1 = box
    side = 2 * PAD + 3 * CELL + 2 * GAP
    assert abs((x1 - x0) - side) <= 3 and abs((y1 - y0) - side) <= 3, box
    x_ink, o_ink, move_ink = rgb(COLORS["x"]), rgb(COLORS["o"]), rgb(COLORS["move"])
    empty = rgb(COLORS["ttt_cell"])
    for (r, c), mark in marks.items():
        left, top = x0 + PAD + c * (CELL + GAP), y0 + PAD + r * (CELL + GAP)
        cell = (left + 4, top + 4, left + CELL - 4, top + CELL - 4)
        xs, os_, yellow = (_count(image, cell, ink) for ink in (x_ink, o_ink, move_ink))
        where = f"cell {r},{c} ({mark or 'empty'}): X {xs}, O {os_}, move {yellow} px"
        if (r, c) == move:
            assert yellow > 1500 and xs == 0 and os_ == 0, where  # the move: its ghost, faded
        elif mark == "x":
            assert xs > 150 and os_ == 0 and yellow == 0, where
        elif mark == "o":
            assert os_ > 150 and xs == 0 and yellow == 0, where
        else:
            assert xs == os_ == yellow == 0, where
            assert image.getpixel((left + CELL // 2, top + CELL // 2)) == empty, where
