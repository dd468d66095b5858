"""Training against a fixed opponent (`mars train --opponent SPEC`) on the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_mars
from typer.testing import CliRunner

from core.tiny_model import ensure_tiny_model
from games.spec import get_game
from mars.main import app, register_commands
from train_backend.local.opponents import policy_seat

register_commands()


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _train(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["train", *args])
    return result.exit_code, result.output


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_policy_seat_alternates_and_meets_every_kuhn_deal_in_both_seats() -> None:
    kuhn = get_game("kuhn_poker")
    seen = {(seed % kuhn.deal_count, policy_seat(kuhn, seed)) for seed in range(100, 112)}
    assert len(seen) == 2 * kuhn.deal_count  # 12 consecutive seeds: every (deal, seat) once
    board = get_game("tic_tac_toe")
    assert [policy_seat(board, seed) for seed in range(4)] == [0, 1, 0, 1]


def test_a_bot_opponent_trains_only_the_policys_seat(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, output = _train(
        "--games", "kuhn_poker,tic_tac_toe", "--opponent", "random", "--steps", "1",
        "--games-per-step", "8", "--max-tokens", "8", "--eval-every", "0",
        "--run-dir", str(run), "--quiet",
    )  # fmt: skip
    assert code == 0, output
    records = _lines(run / "records.jsonl")
    assert len(records) == 8
    for record in records:
        seat = policy_seat(get_game(record["game"]), record["seed"])
        assert record["policy_seat"] == seat
        model_seats = {turn["seat"] for turn in record["turns"] if "usage" in turn}
        assert model_seats == {seat}  # the other seat's moves came from the bot
    assert {r["policy_seat"] for r in records} == {0, 1}
    metrics = _lines(run / "metrics.jsonl")[0]
    policy_turns = sum(
        1 for r in records for turn in r["turns"] if turn["seat"] == r["policy_seat"]
    )
    assert metrics["turns"] == policy_turns
    assert json.loads((run / "run.json").read_text())["config"]["opponent"] == "random"


def test_a_checkpoint_opponent_plays_in_process_and_is_not_trained(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, output = _train(
        "--games", "kuhn_poker", "--opponent", f"checkpoint:{ensure_tiny_model()}",
        "--steps", "1", "--games-per-step", "12", "--max-tokens", "8",
        "--eval-every", "0", "--run-dir", str(run), "--quiet",
    )  # fmt: skip
    assert code == 0, output
    records = _lines(run / "records.jsonl")
    # Both seats are model seats, but only the policy's turns are rows of the step.
    opponent_turns = [
        turn for r in records for turn in r["turns"] if turn["seat"] != r["policy_seat"]
    ]
    assert opponent_turns and all("usage" in turn for turn in opponent_turns)
    policy_turns = sum(
        1 for r in records for turn in r["turns"] if turn["seat"] == r["policy_seat"]
    )
    assert _lines(run / "metrics.jsonl")[0]["turns"] == policy_turns


@pytest.mark.parametrize(
    ("opponent", "message"),
    [
        ("llm", "leave --opponent out for self-play"),
        ("grandmaster", "unknown player"),
        ("checkpoint:/no/such/folder", "is not a model folder"),
    ],
)
def test_a_bad_opponent_is_one_line_and_writes_nothing(
    tmp_path: Path, opponent: str, message: str
) -> None:
    run = tmp_path / "run"
    result = run_mars(
        "train", "--games", "kuhn_poker", "--opponent", opponent, "--steps", "1",
        "--run-dir", str(run),
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not run.exists()


def test_the_verl_backend_refuses_a_model_opponent_in_one_line(tmp_path: Path) -> None:
    # verl's agent loop plays bot opponents (tests/test_verl_tree.py); a model one needs a server
    run = tmp_path / "run"
    result = run_mars(
        "train", "--trainer", "verl", "--opponent", "pool", "--dry-run", "--run-dir", str(run)
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "plays bots only" in lines[0], result.stderr
    assert not run.exists()


def test_a_pool_opponent_plays_past_snapshots_drawn_per_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = tmp_path / "pool.yaml"
    config.write_text("pool_every: 1\npool_size: 2\n")
    code, output = _train(
        "--games", "kuhn_poker", "--opponent", "pool", "--steps", "4", "--games-per-step", "6",
        "--max-tokens", "8", "--eval-every", "0", "--config", str(config),
        "--run-dir", str(run), "--quiet",
    )  # fmt: skip
    assert code == 0, output
    metrics = _lines(run / "metrics.jsonl")
    # The start is the first snapshot; one joins after every step; the newest two are kept.
    assert [m["pool_size"] for m in metrics] == [2, 2, 2, 2]
    assert metrics[0]["pool_opponent_step"] == 0
    for m in metrics[1:]:  # drawn among the two snapshots held when the step began
        assert m["pool_opponent_step"] in (max(0, m["step"] - 2), m["step"] - 1)
    records = _lines(run / "records.jsonl")
    assert all(r["policy_seat"] == policy_seat(get_game("kuhn_poker"), r["seed"]) for r in records)
    policy_turns = sum(1 for r in records for t in r["turns"] if t["seat"] == r["policy_seat"])
    assert sum(m["turns"] for m in metrics) == policy_turns  # the pool's turns are not trained
