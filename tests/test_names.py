"""Messages about names and counts: "did you mean", articles, plurals, the no-update warning."""

from __future__ import annotations

import pytest

from core.names import a_run_of, closest, counted, unknown_name
from train_backend.local.step_metrics import NO_UPDATE_WARNING, evaluation_lines, progress_line

GAMES = ["connect_four", "kuhn_poker", "leduc_poker", "tic_tac_toe"]


@pytest.mark.parametrize(
    ("asked", "guess"),
    [("kuhn", "kuhn_poker"), ("tictactoe", "tic_tac_toe"), ("Leduc_Poker", "leduc_poker")],
)
def test_a_near_name_is_offered(asked: str, guess: str) -> None:
    assert closest(asked, GAMES)[0] == guess
    assert f"(did you mean {guess!r}" in unknown_name("game", asked, GAMES)


def test_a_far_name_gets_the_list_only() -> None:
    message = unknown_name("game", "chess", GAMES)
    assert message == f"unknown game 'chess'; known: {', '.join(GAMES)}"


def test_articles_and_plurals() -> None:
    assert a_run_of("eval") == "an 'eval' run" and a_run_of("train") == "a 'train' run"
    assert (
        counted(1, "checkpoint") == "1 checkpoint" and counted(0, "checkpoint") == "0 checkpoints"
    )
    assert counted(2, "reply", "replies") == "2 replies"


STEP = {
    "step": 3, "reward_mean": 0.1, "invalid_rate": 0.0, "loss": 0.0, "clip_frac": 0.0,
    "tokens_per_s": 100.0, "seconds_per_step": 1.0,
}  # fmt: skip


def test_a_step_without_an_optimiser_update_says_so() -> None:
    assert progress_line({**STEP, "optimizer_updates": 0}, 5).endswith(NO_UPDATE_WARNING)
    assert NO_UPDATE_WARNING not in progress_line({**STEP, "optimizer_updates": 2}, 5)


def test_the_workflow_trainer_warns_when_no_policy_updated() -> None:
    from train_backend.mas.trainer import _progress

    metrics = {"step": 1, "train_accuracy": 0.5, "seconds_per_step": 2.0}
    idle = {**metrics, "policy/coder/updates": 0, "policy/thinker/updates": 0}
    assert _progress(idle, 4).endswith(NO_UPDATE_WARNING)
    assert NO_UPDATE_WARNING not in _progress({**idle, "policy/thinker/updates": 1}, 4)


def test_evaluation_lines_name_game_opponent_seat_and_interval() -> None:
    prefix = "eval/kuhn_poker/random/first"
    metrics = {
        f"{prefix}/win": 0.5, f"{prefix}/ci95_low": 0.2, f"{prefix}/ci95_high": 0.8,
        f"{prefix}/invalid_rate": 0.1, f"{prefix}/n": 10,
        "exploitability/kuhn_poker": 0.25, "exploitability/kuhn_poker/ci95_low": 0.2,
        "exploitability/kuhn_poker/ci95_high": 0.3,
    }  # fmt: skip
    assert evaluation_lines(metrics) == [
        "  kuhn_poker vs random, first seat: win 0.50 [0.20, 0.80], invalid 0.10 (n 10)",
        "  kuhn_poker exploitability 0.250 [0.200, 0.300]",
    ]
    assert evaluation_lines({"step": 1}) == []


def test_the_training_commands_default_to_the_same_threads() -> None:
    from mars.command_check import mars_group

    commands = mars_group().commands

    def threads(name: str) -> object:
        return next(p.default for p in commands[name].params if p.name == "threads")

    assert threads("train") == threads("train-mas") == 1
