"""How many of a training step's games were different games (`selfplay/distinct_games`): the
counting function on records made by hand, and a real short CPU training whose metric is
recounted from the run's own records.jsonl by replaying each game."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from model_testkit import kuhn_model

from core.runstore import RunDir
from games.positions import replay_positions
from games.selfplay import distinct_games, game_line
from games.spec import get_game
from train_backend.config import TrainConfig
from train_backend.local.step_metrics import DISTINCT_GAMES, DISTINCT_SHARE
from train_backend.local.trainer import train_local


def _record(game: str, seed: int, moves: list[tuple[int, str | None]]) -> dict[str, Any]:
    turns = [
        {"seat": seat, "turn": index, "action": action, "legal": action is not None}
        for index, (seat, action) in enumerate(moves)
    ]
    return {"game": game, "seed": seed, "turns": turns}


TTT = [(0, "<X(1,1)>"), (1, "<O(0,0)>")]


def test_games_are_the_same_when_deal_and_every_move_are() -> None:
    # Tic-Tac-Toe has no chance: the seed does not make a game another one.
    same = [_record("tic_tac_toe", seed, TTT) for seed in range(5)]
    assert distinct_games(same, "natural") == 1
    other_move = _record("tic_tac_toe", 9, [TTT[0], (1, "<O(2,2)>")])
    invalid = _record("tic_tac_toe", 9, [TTT[0], (1, None)])  # an invalid reply is its own move
    assert distinct_games([*same, other_move, invalid], "natural") == 3
    # the variant is another game, even with the same moves
    assert distinct_games([*same, _record("tic_tac_toe.v1", 0, TTT)], "natural") == 2


def test_a_poker_game_is_its_deal_and_its_moves() -> None:
    kuhn = get_game("kuhn_poker")
    assert kuhn.deal_count == 6
    moves = [(0, "<PASS>"), (1, "<PASS>")]
    # seeds 0 and 6 play the same deal, seed 1 another
    assert distinct_games([_record("kuhn_poker", s, moves) for s in (0, 6)], "natural") == 1
    assert distinct_games([_record("kuhn_poker", s, moves) for s in (0, 1)], "natural") == 2
    # Leduc: 120 deals naturally, the MARSHAL code's 24 under `rank_triples`
    records = [_record("leduc_poker", s, [(0, "<CALL>")]) for s in (3, 27)]
    assert distinct_games(records, "natural") == 2
    assert distinct_games(records, "rank_triples") == 1
    assert game_line(records[0], "rank_triples")[1] == 3


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("estimator", ["grpo", "at_grpo"])
def test_a_real_training_logs_the_distinct_games_its_records_show(
    tmp_path: Path, estimator: str
) -> None:
    """Kuhn (the test model plays it legally, so games differ by deal and moves) and Tic-Tac-Toe
    (the model cannot write a legal move there: every game is the same forfeit). With tree
    sampling, only the main lines are games: branches replay them and are not recorded."""
    torch.set_num_threads(1)
    config = TrainConfig.for_local(
        model=str(kuhn_model()),
        games=["kuhn_poker", "tic_tac_toe"],
        steps=1,
        games_per_step=24,
        max_new_tokens=24,
        prompt_style="compact",
        estimator=estimator,
        tree={"branches": 2},
        eval_every=0,
        save_every=1,
    )
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    train_local(config, run, command=["test"], log=lambda _line: None)
    records = _lines(run.path / "records.jsonl")
    metrics = {row["step"]: row for row in _lines(run.path / "metrics.jsonl")}
    assert sorted(metrics) == [1]
    for step, row in metrics.items():
        games = [r for r in records if r["step"] == step]
        assert len(games) == 24 == row["episodes"]
        # recounted from what a replay of each record shows: its cards, boards and moves
        replays = {json.dumps(replay_positions(r), sort_keys=True) for r in games}
        assert row[DISTINCT_GAMES] == len(replays)
        assert row[DISTINCT_SHARE] == pytest.approx(len(replays) / 24)
        board = {json.dumps(replay_positions(r)) for r in games if r["game"] == "tic_tac_toe"}
        assert len(board) == 1  # twelve forfeits at the first move: one game
        # Kuhn's twelve games play each of its six deals twice: 6 to 12 distinct games
        assert 7 <= row[DISTINCT_GAMES] <= 13
