"""`rating:GAME:EPISODES[:PREVIOUS]` loop items: each new checkpoint plays the bots and the latest
earlier checkpoints (`mars arena --opponent llm:FOLDER`, the earlier checkpoint served by the
sub-command) and gets a rating with its interval on the learning curve."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_mars

from core.errors import MarsError
from core.runstore import RunDir
from games.ratings import collect_matches, rate_game
from mars.orchestration.loop import (
    Checkpoint,
    RatingItem,
    check_spec,
    flatten_row,
    parse_spec,
    rating_opponents,
)


def test_inline_rating_items_and_their_defaults() -> None:
    spec = parse_spec("rating:tic_tac_toe:10,rating:kuhn_poker:4:0")
    first, second = spec.evals
    assert isinstance(first, RatingItem) and first.key == "rating-tic_tac_toe"
    assert (first.episodes, first.previous, first.bots, first.bootstrap) == (10, 2, ["random"], 0)
    assert (second.game, second.episodes, second.previous) == ("kuhn_poker", 4, 0)
    check_spec(spec)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rating:tic_tac_toe", "write rating:GAME:EPISODES"),
        ("rating:tic_tac_toe:x", "write rating:GAME:EPISODES"),
        ("rating:tic_tac_toe:3:1:2", "write rating:GAME:EPISODES"),
        ("rating:mini_hanabi:3", "mini_hanabi is cooperative"),
        ("rating:chess:3", "unknown game"),
    ],
)
def test_bad_rating_items_are_one_error(text: str, message: str) -> None:
    with pytest.raises(MarsError, match=message):
        check_spec(parse_spec(text))


def test_a_rating_item_plays_its_bots_then_the_latest_earlier_checkpoints(tmp_path: Path) -> None:
    item = RatingItem(game="tic_tac_toe", episodes=2, previous=2, bots=["random", "mcts:10"])
    earlier = [Checkpoint(step, tmp_path / f"step_{step}") for step in (0, 5, 10)]
    assert rating_opponents(item, earlier) == [
        ("random", "random"),
        ("mcts:10", "mcts10"),
        (f"llm:{tmp_path / 'step_5'}", "step_5"),
        (f"llm:{tmp_path / 'step_10'}", "step_10"),
    ]
    assert rating_opponents(item.model_copy(update={"previous": 0}), earlier)[-1][0] == "mcts:10"
    entry = {"kind": "rating", "rating": 950.5, "ci95": [900.0, 1001.0], "rank": 2}
    entry |= {"players": 3, "games": 8, "score": 0.25}
    flat = flatten_row({"step": 3, "evals": {"rating-tic_tac_toe": entry}})
    assert flat["rating-tic_tac_toe/rating"] == 950.5
    assert flat["rating-tic_tac_toe/rating_ci95_low"] == 900.0
    assert flat["rating-tic_tac_toe/rating_ci95_high"] == 1001.0
    assert flat["rating-tic_tac_toe/rank"] == 2 and flat["rating-tic_tac_toe/games"] == 8


@pytest.mark.slow
def test_two_tiny_checkpoints_play_each_other_in_the_loop(tmp_path: Path) -> None:
    from core.tiny_model import ensure_tiny_model

    tiny = ensure_tiny_model()
    watch, loop = tmp_path / "checkpoints", tmp_path / "loop"
    for step in (1, 2):
        shutil.copytree(tiny, watch / f"step_{step}")
        info = {"step": step, "config": {"prompt_style": "compact", "max_new_tokens": 16}}
        (watch / f"step_{step}" / "checkpoint.json").write_text(json.dumps(info))
    result = run_mars("loop", "--watch", str(watch), "--eval", "rating:tic_tac_toe:1:1",
                      "--once", "--run-dir", str(loop), timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [json.loads(line) for line in (loop / "learning_curve.jsonl").open()]
    assert [row["step"] for row in rows] == [1, 2] and all(row["error"] is None for row in rows)
    first, second = (row["evals"]["rating-tic_tac_toe"] for row in rows)
    step_1, step_2 = (str((watch / f"step_{n}").resolve()) for n in (1, 2))
    assert list(first["matches"]) == ["random"]  # nothing earlier to play yet
    assert list(second["matches"]) == ["random", "step_1"]

    # Checkpoint against checkpoint: step_2 (served by the loop) against step_1 (served by the
    # sub-command for itself), one episode from each seat.
    match = RunDir.open(loop / second["matches"]["step_1"]["run_dir"])
    records = match.records()
    assert sorted(r["seat"] for r in records) == ["first", "second"]
    assert {(r["player_id"], r["opponent_id"]) for r in records} == {(step_2, step_1)}
    assert {r["opponent"] for r in records} == {f"llm:{step_1}"}
    summary = match.summary()
    assert summary is not None
    own_calls = sum(r["model_turns"][0 if r["seat"] == "first" else 1] for r in records)
    their_calls = sum(r["model_turns"][1 if r["seat"] == "first" else 0] for r in records)
    assert summary["usage"]["totals"]["calls"] == own_calls > 0
    assert summary["usage_by_model"][step_1]["totals"]["calls"] == their_calls > 0
    assert "--base-url" in match.info().command  # step_2 played through the loop's own server

    # The rating on the curve is the fit over every tic-tac-toe game the loop has played by then.
    assert second["player"] == step_2 and second["anchor"] == "random"
    players = {row["player"] for row in second["table"]}
    assert players == {step_1, step_2, "random"} and second["players"] == 3
    assert second["games"] == 4  # 2 against random, 2 against step_1
    low, high = second["ci95"]
    assert low < second["rating"] < high
    matches = []
    for sub_run in sorted(loop.glob("step_*")):
        matches += collect_matches(RunDir.open(sub_run).records()).matches
    refit = rate_game(matches, anchor="random")
    mine = next(row for row in refit["players"] if row["player"] == step_2)
    assert mine["rating"] == pytest.approx(second["rating"])
    with (loop / "learning_curve.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert float(table[1]["rating-tic_tac_toe/rating"]) == pytest.approx(second["rating"])
    assert float(table[1]["rating-tic_tac_toe/rating_ci95_low"]) == pytest.approx(low)

    rated = run_mars("ratings", str(loop), "--anchor", "random")
    assert rated.returncode == 0, rated.stderr
    final = json.loads((loop / "ratings.json").read_text())["games"]["tic_tac_toe"]
    assert {row["player"] for row in final["players"]} == players


def test_an_exploitability_items_action_shares_reach_the_curve() -> None:
    from mars.orchestration.loop import exploit_figures

    summary = {"exploitability": 0.3, "ci95": [0.2, 0.4], "action_shares": {"J -": {"BET": 0.2}}}
    entry = {"kind": "exploit", **exploit_figures(summary)}
    flat = flatten_row({"step": 5, "evals": {"exploit-kuhn_poker": entry}})
    assert flat["exploit-kuhn_poker/policy/J -/BET"] == 0.2
    assert flat["exploit-kuhn_poker/exploitability"] == 0.3
